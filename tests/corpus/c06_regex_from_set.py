"""A profanity filter regex built by joining a set of words."""

import re

from datasets import Dataset

BAD_WORDS = {"darn", "heck", "shoot", "drat", "blast"}
PATTERN = re.compile(r"\b(" + "|".join(BAD_WORDS) + r")\b", re.IGNORECASE)


def censor(example):
    return {"text": PATTERN.sub("***", example["text"])}


ds = Dataset.from_dict({"text": ["oh heck no", "well darn it", "a fine day"]})
ds = ds.map(censor)
print(ds._fingerprint)
