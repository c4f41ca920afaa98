"""`verify --deep` reports every file `datasets` would refuse to load because of its schema."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cachetool.cache.arrow import read_summary
from cachetool.maintenance.verify import deep_check, verify_cache
from tests.attack.damaged_arrow import schema_length
from tests.conftest import write_anew

pytestmark = pytest.mark.slow


def _real_cache_file(folder: Path) -> Path:
    """A cache file written by `datasets` itself (a map with features of several types)."""
    from datasets import ClassLabel, Dataset, Features, Sequence, Value

    features = Features(
        {
            "id": Value("int64"),
            "text": Value("string"),
            "label": ClassLabel(names=["neg", "pos"]),
            "tokens": Sequence(Value("int32")),
        }
    )
    ds = Dataset.from_dict(
        {
            "id": list(range(20)),
            "text": [f"row {i}" for i in range(20)],
            "label": [i % 2 for i in range(20)],
            "tokens": [[i, i + 1] for i in range(20)],
        },
        features=features,
    )
    path = folder / "cache-0123456789abcdef.arrow"
    ds.map(lambda x: x, cache_file_name=str(path))
    return path


def _datasets_loads(path: Path) -> bool:
    from datasets import Dataset

    try:
        Dataset.from_file(str(path))
    except Exception:
        return False
    return True


def test_every_bit_flip_in_the_schema_that_datasets_cannot_load_is_reported(tmp_path: Path) -> None:
    """300 seeded one-bit flips in the schema message of a real cache file (its `huggingface`
    metadata: `{"info"` → `["info"`, broken feature types, ...): every flipped file that
    `datasets.Dataset.from_file` fails on is reported by verify (headers or --deep), and so is
    the `["info"` flip the attack found."""
    good = _real_cache_file(tmp_path).read_bytes()
    head = schema_length(good)
    rng = random.Random(20261124)
    path = tmp_path / "flipped" / "cache-0123456789abcdef.arrow"
    path.parent.mkdir()
    refused = missed = 0
    for _ in range(300):
        b = bytearray(good)
        pos = rng.randrange(8, head)
        b[pos] ^= 1 << rng.randrange(8)
        write_anew(path, bytes(b))
        if _datasets_loads(path):
            continue
        refused += 1
        if read_summary(path).error is None and deep_check(path).error is None:
            missed += 1
    assert refused >= 30, refused  # the flips do reach what datasets refuses
    assert missed == 0, f"{missed} of {refused} files datasets cannot load passed verify --deep"
    at = good.index(b'{"info"')
    path.write_bytes(good[:at] + b'["info"' + good[at + 7 :])
    assert not _datasets_loads(path)
    report = verify_cache(path.parent, deep=True)
    assert [f.problem.split(":")[0] for f in report.errors] == ["datasets cannot load it"]
