"""What verify keeps and reads (ledger records, stored checksums) never makes it move a user's
files: a record naming a file `datasets` did not write moves nothing, a file rewritten on purpose
after `--record` is recorded again instead of quarantined as bit rot, and two `--record` runs at
once keep each other's checksums."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.conftest import as_another_user, hf_env
from tests.test_stale_downstream import _edit_helper, _project, _run

pytestmark = pytest.mark.slow


def _verify(env: dict[str, str], root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "cachetool", "verify", "--json", "--cache-dir", str(root), *args]
    proc = forks.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_stale_record_naming_a_user_file_moves_nothing_but_datasets_files(tmp_path: Path) -> None:
    """A ledger record whose step lists a file of the user's (here a notes file in the cache
    root, first in its list) besides the step's cache file: `verify --stale --quarantine --yes`
    leaves the user's file where it is and moves the stale cache file the record names."""
    project, env = _project(tmp_path)
    root = tmp_path / "cache"
    fps = _run(project, env)["fps"]
    assert isinstance(fps, list)
    _edit_helper(project)
    notes = root / "team-notes.txt"
    notes.write_text("do not move me\n")
    (segment,) = (root / ".cachetool" / "ledger").glob("*.jsonl")
    text = segment.read_text()
    cache_file = next(root.rglob(f"cache-{fps[0]}.arrow"))
    real = f'"files":[{{"path":"{cache_file}"'
    assert text.count(real) == 1
    forged = f'"files":[{{"path":"{notes}","size":15,"status":"written"}},{{"path":"{cache_file}"'
    segment.write_text(text.replace(real, forged))

    code, doc = _verify(env, root, "--stale", "--quarantine", "--yes")
    assert code == 1
    assert notes.read_text() == "do not move me\n"
    moved = {q["from"] for q in doc["quarantined"]}
    assert str(notes) not in moved
    assert str(cache_file) in moved
    # The finding names the step's cache file, never the user's file the record lists first.
    assert all(f["path"] != str(notes) for f in doc["findings"]), doc["findings"]


SAVE = """
import sys
from datasets import Dataset
version = sys.argv[2]
rows = {"text": [f"row {i} {version}" for i in range(3000)]}
Dataset.from_dict(rows).save_to_disk(sys.argv[1], num_shards=2)
"""

LOAD = """
import sys
from datasets import load_from_disk
print(load_from_disk(sys.argv[1])["text"][7])
"""

MAP = """
import os
import sys
from datasets import load_dataset
ds = load_dataset("csv", data_files=sys.argv[1], split="train")
# The fingerprint hashes the code, not the environment: a recomputation writes other values.
out = ds.map(lambda ex: {"n": len(ex["text"]) + int(os.environ.get("BUMP", "0"))},
             load_from_cache_file=sys.argv[2] == "cached")
print(out._fingerprint)
"""


def _python(env: dict[str, str], code: str, *args: str) -> str:
    """What `python SCRIPT ARGS` printed last, the script holding `code`, forked warm (no
    assertion here rests on the hash seed: a lambda's fingerprint is the same in every process)."""
    script = Path(env["HF_HOME"]).parent / f"script-{hashlib.sha1(code.encode()).hexdigest()[:8]}.py"
    script.write_text(code)
    proc = forks.run(
        [sys.executable, str(script), *args],
        env=env, capture_output=True, text=True, timeout=240, preload=forks.PIPELINE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def test_a_dataset_saved_again_after_record_is_recorded_again_not_quarantined(tmp_path: Path) -> None:
    """`save_to_disk` again to the same folder after `verify --deep --record` rewrites its files
    whole: `verify --deep` says they were rewritten (exit 0) and how to record them again, and
    writes nothing (a read); `verify --deep --quarantine --yes` moves nothing, so `load_from_disk`
    still loads the new data; after `--record`, nothing more is said. A saved file damaged since
    (cut short) is an error that is reported but never moved: nothing recomputes a saved dataset."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    saved = root / "saved"
    _python(env, SAVE, str(saved), "v1")
    code, doc = _verify(env, root, "--deep", "--record")
    assert code == 0 and doc["checksums_recorded"] == 2
    _python(env, SAVE, str(saved), "v2")
    sums = root / ".cachetool" / "checksums.json"
    recorded = sums.read_bytes(), sums.stat().st_mtime_ns

    for args in (("--deep",), ("--deep", "--quarantine", "--yes")):
        code, doc = _verify(env, root, *args)
        assert code == 0, doc["findings"]
        assert doc["quarantined"] == []
        rewritten = [f for f in doc["findings"] if "rewritten" in f["problem"]]
        assert sorted(f["path"] for f in rewritten) == sorted(str(p) for p in saved.glob("data-*.arrow"))
        assert all("verify --deep --record" in f["hint"] for f in rewritten), rewritten
        assert (sums.read_bytes(), sums.stat().st_mtime_ns) == recorded
    assert _python(env, LOAD, str(saved)) == "row 7 v2"
    assert _verify(env, root, "--deep", "--record")[0] == 0
    code, doc = _verify(env, root, "--deep")
    assert code == 0 and doc["findings"] == []  # recorded again: nothing more to say

    shard = sorted(saved.glob("data-*.arrow"))[0]
    shard.write_bytes(shard.read_bytes()[:-300])
    code, doc = _verify(env, root, "--deep", "--quarantine", "--yes")
    assert code == 1 and doc["quarantined"] == []
    assert shard.is_file()
    assert any(f["path"] == str(shard) and "saved dataset" in f["problem"] for f in doc["findings"])


def test_a_map_recomputed_after_record_is_said_rewritten_and_moved_nowhere(tmp_path: Path) -> None:
    """A map recomputed with `load_from_cache_file=False` writes its cache file anew under the
    same fingerprint: the next `verify --deep --quarantine --yes` says it was rewritten and moves
    nothing."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    data = tmp_path / "data.csv"
    data.write_text("text\n" + "".join(f"line {i}\n" for i in range(500)))
    fp = _python(env, MAP, str(data), "cached")
    code, _ = _verify(env, root, "--deep", "--record")
    assert code == 0
    assert _python({**env, "BUMP": "1"}, MAP, str(data), "recompute") == fp
    code, doc = _verify(env, root, "--deep", "--quarantine", "--yes")
    assert code == 0 and doc["quarantined"] == [], doc["findings"]
    assert [Path(f["path"]).name for f in doc["findings"] if "rewritten" in f["problem"]] == [
        f"cache-{fp}.arrow"
    ]


def test_checksums_recorded_wrongly_are_findings_and_move_nothing(tmp_path: Path) -> None:
    """A checksums file whose every hash is wrong (edited, or written by a broken tool): each
    file is reported as differing from its record, says its stream validates in full, and none
    moves; the data stays loadable."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    saved = root / "saved"
    data = tmp_path / "data.csv"
    data.write_text("text\n" + "".join(f"line {i}\n" for i in range(500)))
    # SAVE then MAP in one interpreter (one import of datasets), each with its own arguments.
    _python(
        env,
        f"import sys\nsys.argv[1:] = {[str(saved), 'v1']!r}\n{SAVE}\n"
        f"sys.argv[1:] = {[str(data), 'cached']!r}\n{MAP}",
    )
    code, doc = _verify(env, root, "--deep", "--record")
    assert code == 0 and doc["checksums_recorded"] >= 4
    sums = root / ".cachetool" / "checksums.json"
    stored = json.loads(sums.read_text())
    for v in stored["files"].values():
        v["xxh3"] = "0" * 16
    sums.write_text(json.dumps(stored))
    code, doc = _verify(env, root, "--deep", "--quarantine", "--yes")
    assert code == 1 and doc["quarantined"] == []
    differ = [f for f in doc["findings"] if "checksum recorded" in f["problem"]]
    assert len(differ) == len(stored["files"])
    assert all("stream validates" in f["problem"] for f in differ), differ
    assert _python(env, LOAD, str(saved)) == "row 7 v1"


def test_two_concurrent_deep_records_keep_each_others_checksums(tmp_path: Path) -> None:
    """Two `verify --deep --record` processes at once (two CI jobs), each over its own entries
    of one cache: `checksums.json` ends up with the checksums of both."""
    from tests.attack.races import synthesize_cache

    root = tmp_path / "cache"
    files = synthesize_cache(root, 2)
    import pyarrow as pa

    for path in files:  # big enough that both reads overlap
        table = pa.ipc.open_stream(path).read_all()
        big = pa.concat_tables([table] * 40_000).combine_chunks()
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, big.schema) as w:
            w.write_table(big, max_chunksize=64 * 1024)
    env = hf_env(tmp_path)

    def record(fp: str) -> forks.ForkedProcess | subprocess.Popen[bytes]:
        """`verify FP --deep --record`, forked warm (with pyarrow, which it imports) and started
        at once: the two read their big files side by side."""
        cmd = [*forks.CLI, "verify", fp, "--deep", "--record", "--json", "--cache-dir", str(root)]
        if forks.available():
            return forks.ForkedProcess(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preload=("pyarrow",)
            )
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    for attempt in range(3):
        (root / ".cachetool" / "checksums.json").unlink(missing_ok=True)
        procs = [record(p.stem.removeprefix("cache-")) for p in files]
        outs = [p.communicate(timeout=240) for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        assert [json.loads(o)["checksums_recorded"] for o, _ in outs] == [1, 1]
        stored = json.loads((root / ".cachetool" / "checksums.json").read_text())["files"]
        assert sorted(stored) == sorted(os.fsdecode(p.relative_to(root)) for p in files), attempt


def test_checksums_one_user_recorded_catch_bit_rot_for_every_user(tmp_path: Path) -> None:
    """On a cache several users share, the checksums one user recorded with `verify --deep
    --record` are read by another user's `verify --deep` (a forked child with another uid: the
    kernel, not a mock, decides), which reports a file whose bytes changed since, same size and
    mtime, as an error: not a file called fine."""
    from cachetool.maintenance.verify import verify_cache
    from tests.attack.races import synthesize_cache
    from tests.test_odd_files import _make_traversable

    root = tmp_path / "cache"
    (path,) = synthesize_cache(root, 1)
    assert verify_cache(root, deep=True, record=True).recorded == 1
    _rot(path)
    assert [f.code for f in verify_cache(root, deep=True).findings] == ["checksum-changed"]
    if os.geteuid() != 0:
        return  # another uid needs root to switch to
    _make_traversable(root)
    assert as_another_user(lambda: [f.code for f in verify_cache(root, deep=True).findings]) == [
        "checksum-changed"
    ]


def test_checksums_another_user_cannot_read_are_said_unread_and_never_replaced(tmp_path: Path) -> None:
    """Checksums stored where this user may not read them (another user's, recorded with umask
    077) are said to be unread by `verify --deep`, and `--record` stores nothing rather than
    replace them with its own: every checksum recorded before is still there."""
    from cachetool.maintenance.verify import verify_cache
    from tests.attack.races import synthesize_cache
    from tests.test_odd_files import _make_traversable

    if os.geteuid() != 0:
        pytest.skip("another uid needs root to switch to")
    root = tmp_path / "cache"
    synthesize_cache(root, 1)
    verify_cache(root, deep=True, record=True)
    stored = root / ".cachetool" / "checksums.json"
    stored.chmod(0o600)
    before = stored.read_bytes()
    _make_traversable(root)
    (root / ".cachetool").chmod(0o777)  # a shared cache: every user may write there
    assert as_another_user(lambda: [f.code for f in verify_cache(root, deep=True).findings]) == [
        "checksums-unread"
    ]
    codes = as_another_user(lambda: [f.code for f in verify_cache(root, deep=True, record=True).findings])
    assert codes == ["checksums-unread", "checksums-not-stored"]
    assert stored.read_bytes() == before


def _rot(path: Path) -> None:
    """Change one value inside the Arrow stream at `path` in place: same inode, size and mtime."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    at = len(data) - 8 - 64 * 8 + 8  # a value of the `id` column, the marker and other values kept
    data[at] ^= 0x01
    with open(path, "r+b") as f:  # in place: same inode, same size
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
