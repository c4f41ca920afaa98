"""The ledger index: what `ls` reads instead of every record of a long-lived ledger. Whatever is
appended, torn, removed or updated by several commands at once, it says what the records say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.cache.roots import ledger_dir
from cachetool.history.index import INDEX_FILE, index_path
from cachetool.history.ledger import read_ledger, usage_by_fingerprint
from cachetool.history.writer import LedgerWriter
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
    assert index_path(root).is_file() and not (ledger_dir(root).parent / INDEX_FILE).exists()

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
from cachetool.history.ledger import usage_by_fingerprint
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


def test_lineage_read_through_the_index_is_the_lineage_of_every_record(tmp_path: Path) -> None:
    """`lineage` of a long-lived ledger reads only the records of the fingerprint's family
    through the index; the chain, the descendants and the forest it shows are those that reading
    every record shows: branches, a no-op step, an internal step that wrote a file, a gc removal,
    and runs of other families that it skips."""
    from cachetool.cache.scan import scan_cache
    from cachetool.history.ledger import Ledger
    from cachetool.history.part import open_index
    from cachetool.history.query import lineage, lineage_view

    root = tmp_path / "cache"
    for run in range(3):
        w = LedgerWriter(pid=run + 1, start=float(run))
        src = f"src{run % 2}"  # two families
        w.append(str(root), _record(0, src, None, type="root", operation="load_dataset", time=100.0 * run))
        w.append(str(root), _record(1, f"a{run % 2}", src, time=100.0 * run + 1))
        w.append(str(root), _record(2, f"b{run}", f"a{run % 2}", time=100.0 * run + 2))  # a branch per run
        w.append(str(root), _record(3, f"b{run}", f"b{run}", time=100.0 * run + 3))  # no-op
        files = [{"path": str(root / f"cache-c{run}.arrow"), "size": 3, "status": "written"}]
        w.append(
            str(root), _record(4, f"c{run}", f"b{run}", internal=True, files=files, time=100.0 * run + 4)
        )
        w.close()
    gc = {"v": 1, "type": "gc", "seq": 0, "time": 500.0, "action": "removed", "fingerprint": "b0"}
    gc |= {"aliases": [], "kind": "transform", "path": "/x", "paths": ["/x"], "size": 1, "files": 1}
    LedgerWriter(pid=9, start=9.0).append(str(root), gc)
    report = scan_cache(root)
    assert open_index(root) is not None  # every record reads: lineage takes the index
    for fp in ("b0", "a0", "c2"):
        for mode, keywords in (("chain", {}), ("descendants", {"descendants": True}), ("all", {"all": True})):
            whole = lineage_view(report, fp, mode=mode, ledger=Ledger.load(root))  # type: ignore[arg-type]
            assert lineage(root, fp, **keywords).to_json() == whole.to_json(), (fp, mode)
    assert [s.fingerprint for _, s in lineage(root, "b0").steps] == ["src0", "a0", "b0"]
    from cachetool.history.show import show_entry

    for fp in ("b0", "c2", "src1"):  # `show` of a fingerprint only the ledger knows: its records
        assert show_entry(root, fp).records == tuple(read_ledger(root).for_result(fp)), fp


def _step(
    run: int, seq: int, result: str, parent: str | None, threshold: str, cache: str
) -> dict[str, object]:
    site = {"file": "/work/pipeline.py", "line": 10 + seq, "function": "<module>"}
    fn = {"qualname": f"step{seq}", "file": "/work/pipeline.py", "line": 3 + seq}
    args = {
        "function": {"digest": f"fn{seq}", "repr": None, "type": "function"},
        "threshold": {"digest": f"t{threshold}", "repr": threshold, "type": "float"},
    }
    at = 1000.0 * run + seq
    return _record(
        seq, result, parent, run=f"h-{run}", time=at, call_site=site, function=fn, args=args, cache=cache
    )


def test_explain_read_through_the_index_is_the_explanation_of_every_record(tmp_path: Path) -> None:
    """`explain FP` (with its history) and `explain --last` of a long-lived ledger read only the
    records they compare, through the index; what they say is what reading every record says:
    the changed argument, the step upstream where it changed, the earlier runs, a first run."""
    from cachetool.history.explain.explainer import explain_fingerprint, explain_run
    from cachetool.history.explain.view import load_view
    from cachetool.history.part import open_index

    root = tmp_path / "cache"
    thresholds = ["0.5", "0.5", "0.6", "0.7", "0.7", "0.8"]
    for run, threshold in enumerate(thresholds):
        w = LedgerWriter(pid=run + 1, start=float(run))
        hit = run > 0 and thresholds[run - 1] == threshold
        loaded = "hit" if run else "miss"
        source = _record(0, "src", None, type="root", operation="load_dataset", run=f"h-{run}", cache=loaded)
        source["time"] = 1000.0 * run
        w.append(str(root), source)
        w.append(str(root), _step(run, 1, f"a{threshold}", "src", threshold, "hit" if hit else "miss"))
        w.append(str(root), _step(run, 2, f"b{threshold}", f"a{threshold}", "0", "hit" if hit else "miss"))
        w.close()
    assert open_index(root) is not None
    for fp in ("b0.8", "a0.6", "b0.5"):
        whole = explain_fingerprint(root, fp, history=3, view=load_view(root))
        assert explain_fingerprint(root, fp, history=3).to_json() == whole.to_json(), fp
    whole_run = explain_run(root, view=load_view(root))
    assert explain_run(root).to_json() == whole_run.to_json()
    reasons = [(s.step.fingerprint, r.kind) for s in whole_run.steps for r in s.reasons]
    assert reasons == [("a0.8", "argument"), ("b0.8", "argument")]  # b: its input, upstream
    assert whole_run.steps[1].reasons[0].upstream is not None
    assert explain_fingerprint(root, "b0.5").steps[0].reasons[0].kind == "first-run"
