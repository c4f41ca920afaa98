"""Naming a fingerprint of a long-lived cache without scanning all of it: `lineage FP` and
`explain FP` scan only the folders that can hold the name's entry, and every name resolves to what
it resolves to against the whole scan (the same fingerprint and entry, the same ambiguity, the
same "no entry" error)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.lookup import Resolved, resolve
from cachetool.cache.scan import scan_cache
from cachetool.errors import CachetoolError
from cachetool.history.index import UsageIndex
from cachetool.history.narrow import narrow_report
from cachetool.history.part import IndexedFingerprints, open_index

pytestmark = pytest.mark.slow


def _outcome(name: str, report: Any, known: IndexedFingerprints) -> Resolved | tuple[str, str]:
    try:
        return resolve(name, report, recorded=known)
    except CachetoolError as e:
        return type(e).__name__, str(e)


def _names(report: Any, known: IndexedFingerprints) -> list[str]:
    """Every form a user may type: each fingerprint and alias of an entry and of the ledger, each
    of their prefixes, cache file names (of shards too), and names nothing holds."""
    fps = {fp for e in report.entries for fp in (e.fingerprint, *e.aliases) if fp}
    fps |= set(known.starting_with(""))
    names = {"", "zz", "0" * 16, "cache-.arrow"}
    for fp in fps:
        names |= {fp[:n] for n in range(1, len(fp) + 1)}
        names |= {f"cache-{fp}.arrow", f"cache-{fp}_00000_of_00002.arrow"}
    return sorted(names)


def test_names_resolve_as_against_the_whole_scan(
    golden: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a traced cache (a csv load, maps, a filter, a shuffle, a `num_proc=2` map), every name
    resolves through the folders `narrow_report` scans exactly as through the whole scan, also
    with a file no run recorded whose fingerprint shares a prefix with a recorded one (in another
    folder: the prefix is ambiguous), and with a writer's leftover `tmp*` file holding a recorded
    fingerprint in a folder the ledger never named (the fingerprint is ambiguous)."""
    monkeypatch.setenv("CACHETOOL_HOME", golden["env"]["CACHETOOL_HOME"])
    root = Path(golden["cache"]).resolve()
    con = open_index(root)
    assert con is not None
    known = IndexedFingerprints(con)
    derived = sorted(root.rglob("cache-*.arrow"))
    assert derived
    recorded = next(p for p in derived if p.name[6:-6] in known and "_of_" not in p.name)
    fp = recorded.name[6:-6]
    other = root / "elsewhere" / "copies"  # a folder no run recorded
    untraced = other / f"cache-{fp[:5]}{'f' * (len(fp) - 5)}.arrow"
    leftover = other / "tmpabcd1234"  # a killed writer's file: its header holds `fp`
    made = [untraced, leftover]

    def check(stage: str) -> None:
        full = scan_cache(root, use_index=False, usage=UsageIndex(con))
        seen_narrow = 0
        for name in _names(full, known):
            narrow = narrow_report(root, name, con)
            if narrow is None:
                continue
            seen_narrow += 1
            assert len(narrow.entries) < len(full.entries), (stage, name)
            assert _outcome(name, narrow, known) == _outcome(name, full, known), (stage, name)
        assert seen_narrow > 100, stage  # the narrow path served most names

    try:
        check("as built")
        other.mkdir(parents=True)
        shutil.copyfile(recorded, untraced)
        check("an untraced file shares a prefix")
        assert isinstance(_outcome(fp[:5], scan_cache(root, use_index=False), known), tuple)
        os.remove(untraced)
        shutil.copyfile(recorded, leftover)
        check("a leftover holds a recorded fingerprint")
        assert isinstance(_outcome(fp, scan_cache(root, use_index=False), known), tuple)
    finally:
        for p in made:
            if p.exists():
                os.remove(p)
        shutil.rmtree(other.parent, ignore_errors=True)


def test_lineage_and_explain_of_a_named_fingerprint_are_those_of_the_whole_scan(
    golden: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lineage FP` (chain, descendants, all) and `explain FP` through the narrowed scan show what
    they show when the whole cache is scanned and every record read, by fingerprint, prefix and
    cache file name."""
    from cachetool.history.explain.explainer import explain_fingerprint
    from cachetool.history.explain.view import load_view
    from cachetool.history.ledger import Ledger
    from cachetool.history.query import lineage, lineage_view

    monkeypatch.setenv("CACHETOOL_HOME", golden["env"]["CACHETOOL_HOME"])
    root = Path(golden["cache"]).resolve()
    con = open_index(root)
    assert con is not None
    report = scan_cache(root)
    fps = [
        e.fingerprint for e in report.entries if e.fingerprint and e.fingerprint in IndexedFingerprints(con)
    ]
    assert len(fps) >= 3
    for fp in fps:
        for name in (fp, fp[:10], f"cache-{fp}.arrow"):
            assert narrow_report(root, name, con) is not None, name
            for mode, kw in (("chain", {}), ("descendants", {"descendants": True}), ("all", {"all": True})):
                whole = lineage_view(report, name, mode=mode, ledger=Ledger.load(root))  # type: ignore[arg-type]
                assert lineage(root, name, **kw).to_json() == whole.to_json(), (name, mode)
            whole_explain = explain_fingerprint(root, name, view=load_view(root))
            assert explain_fingerprint(root, name).to_json() == whole_explain.to_json(), name
