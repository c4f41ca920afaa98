"""A dict keyed by frozensets of words (a bag-of-words lookup) passed in fn_kwargs: its values and
their order are the same in every run, its keys pickle in hash-seed order."""

from datasets import Dataset

CITIES = {
    frozenset({"new", "york"}): "NY",
    frozenset({"los", "angeles"}): "LA",
    frozenset({"san", "francisco", "bay"}): "SF",
}


def city(example, cities):
    return {"city": cities.get(frozenset(example["w"].split()), "")}


ds = Dataset.from_dict({"w": ["new york", "york new", "paris"]})
ds = ds.map(city, fn_kwargs={"cities": CITIES})
print(ds._fingerprint)
