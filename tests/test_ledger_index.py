"""The ledger index: what `ls` reads instead of every record of a long-lived ledger. Whatever is
appended, torn, removed or updated by several commands at once, it says what the records say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.lineage.index import INDEX_FILE
from cachetool.lineage.ledger import LedgerWriter, ledger_dir, read_ledger, usage_by_fingerprint
from tests.test_ledger import _record


@pytest.fixture(autouse=True)
def _user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))


def _same_as_the_records(root: Path) -> None:
    indexed = usage_by_fingerprint(root)
    assert dict(indexed.items()) == read_ledger(root).usage()


def test_the_index_follows_appends_torn_lines_and_removed_segments(tmp_path: Path) -> None:
    """Last use, parent, operation and hit counts from the index equal those computed from every
    record: after the first run, after a second run appends, while a record is half written (it
    counts once whole), and after a segment is removed (the index is rebuilt)."""
    root = tmp_path / "cache"
    first = LedgerWriter(pid=1, start=1.0)
    first.append(str(root), _record(0, "src", None, type="root", operation="load_dataset", cache="hit"))
    first.append(str(root), _record(1, "m1", "src"))
    first.append(str(root), _record(2, "m1", "m1"))  # a no-op map: not an origin
    _same_as_the_records(root)
    assert (ledger_dir(root).parent / INDEX_FILE).is_file()

    first.append(str(root), _record(3, "m1", "src", cache="hit"))
    second = LedgerWriter(pid=2, start=2.0)
    second.append(str(root), _record(10, "m2", "m1", operation="filter"))
    second.append(str(root), _record(11, "m1", "src", cache="hit", internal=True))  # internal: not counted
    _same_as_the_records(root)
    usage = usage_by_fingerprint(root)
    assert (usage["m1"].hits, usage["m1"].misses, usage["m1"].records) == (1, 1, 2)
    assert usage["m1"].last_used == pytest.approx(1010.5)  # used as m2's parent

    segment = second.segment_for(str(root))
    assert segment is not None
    line = json.dumps(_record(20, "m3", "m2"))
    segment.append_line(line[:15])  # a writer half way through a record
    with open(segment.path, "rb+") as f:  # append_line ends it with a newline: take it back
        f.seek(-1, os.SEEK_END)
        f.truncate()
    assert "m3" not in usage_by_fingerprint(root)
    with open(segment.path, "a", encoding="utf-8") as f:
        f.write(line[15:] + "\n")
    assert usage_by_fingerprint(root)["m3"].parent == "m2"
    _same_as_the_records(root)

    first_segment = first.segment_for(str(root))
    assert first_segment is not None
    first.close()
    second.close()
    os.remove(first_segment.path)
    _same_as_the_records(root)
    usage = usage_by_fingerprint(root)
    assert "src" not in usage  # only the removed run named it
    assert usage["m2"].parent == "m1"


FOLD = """
import sys
from cachetool.lineage.ledger import usage_by_fingerprint
usage = usage_by_fingerprint(sys.argv[1])
print(sum(u.records for u in usage.values()))
"""


@pytest.mark.slow
def test_commands_bringing_the_index_up_to_date_at_once_count_each_record_once(tmp_path: Path) -> None:
    """Three processes that find the index behind at the same moment: the file lock lets one
    fold the new records, the others find it done; every record is counted once."""
    root = tmp_path / "cache"
    w = LedgerWriter(pid=1, start=1.0)
    for i in range(2000):
        w.append(str(root), _record(i, f"fp{i:06d}", f"fp{i - 1:06d}" if i else None))
    w.close()
    env = {**os.environ, "CACHETOOL_HOME": str(tmp_path / "cachetool_home")}
    procs = [
        subprocess.Popen([sys.executable, "-c", FOLD, str(root)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outs == ["2000"] * 3
    _same_as_the_records(root)
