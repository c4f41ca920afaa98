"""Control: the prompt lists the label set in sorted order."""

from datasets import Dataset

LABELS = {"positive", "negative", "neutral", "mixed"}
PROMPT = "Classify the review as one of: " + ", ".join(sorted(LABELS)) + ".\nReview: "


def to_prompt(example, prompt):
    return {"prompt": prompt + example["review"]}


ds = Dataset.from_dict({"review": ["Loved it", "Terrible", "Fine I guess"]})
ds = ds.map(to_prompt, fn_kwargs={"prompt": PROMPT})
print(ds._fingerprint)
