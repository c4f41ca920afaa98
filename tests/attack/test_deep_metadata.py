"""`verify --deep` reports every file `datasets` would refuse to load because of its schema."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cachetool.cache.arrow import read_summary
from cachetool.maintenance.verify import verify_cache
from cachetool.maintenance.verify.deep import deep_check
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


#: Runs argv[2:] in a child and writes its peak resident memory (KB) to argv[1]: measured from a
#: small process, as a child forked by the test process would count the test's own memory.
_PEAK = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_huge_schema_header_is_a_problem_of_its_file_not_read(tmp_path: Path) -> None:
    """A cache file whose schema metadata is 80 MB (past the 64 MiB `MAX_SCHEMA_BYTES`): `ls` and
    `verify --deep` report it as a problem of that file ("schema header of … bytes, larger than …")
    without reading the header: each stays under 250 MB of memory (reading it took 15 times its
    size: a 300 MB header made `ls` use 1.2 GB and `verify --deep` 4 GB)."""
    import json
    import os
    import subprocess
    import sys

    import pyarrow as pa

    from tests.conftest import hf_env

    root = tmp_path / "cache"
    folder = root / "csv" / "default-0123456789abcdef" / "0.0.0" / ("7" * 64)
    folder.mkdir(parents=True)
    fp = "00000000000000aa"
    features = {"id": {"dtype": "int64", "_type": "Value"}}
    info = {"info": {"features": features, "description": "x" * (80 << 20)}, "fingerprint": fp}
    batch = pa.record_batch([pa.array(range(4))], names=["id"])
    schema = batch.schema.with_metadata({"huggingface": json.dumps(info)})
    path = folder / f"cache-{fp}.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        w.write_batch(batch)
    del info, schema
    env = hf_env(tmp_path)
    for args in (["ls", "--json"], ["verify", "--deep", "--json"]):
        peak = tmp_path / "peak"
        cmd = [sys.executable, "-m", "cachetool", *args, "--cache-dir", str(root)]
        proc = subprocess.run(
            [sys.executable, "-S", "-c", _PEAK, str(peak), *cmd], env=env, capture_output=True, text=True
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        assert "schema header of 83,886," in proc.stdout + proc.stderr, (args, proc.stdout[-2000:])
        assert int(peak.read_text()) < 250 * 1024, (args, int(peak.read_text()) // 1024, "MB")
        assert os.path.getsize(path) > 80 << 20
