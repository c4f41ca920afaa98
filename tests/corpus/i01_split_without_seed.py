"""train_test_split without a seed, then a map over each split.

datasets issue #3847 (cache not re-used): the split draws its permutation from numpy's global state.
Inside, datasets calls `select` with `new_fingerprint=` for each split: those internal steps follow
from the split and must not be blamed as causes of their own.
"""

from corpus_data import splits

ds = splits("i01")["train"]
parts = ds.train_test_split(test_size=0.5)
train = parts["train"].map(lambda ex: {"n": len(ex["text"])})
test = parts["test"].map(lambda ex: {"n": len(ex["text"])})
print(train._fingerprint, test._fingerprint)
