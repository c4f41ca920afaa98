"""Re-key instead of recompute: a map whose fingerprint changed only through an object that does not
change its output takes the earlier result, once sampled batches computed again equal it; a map
whose output did change computes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run, hf_env, invoke
except ImportError:
    from conftest import cachetool_run, hf_env, invoke  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

# Two maps of one input: `clean` drops stop words held in a frozenset (its pickle, so the
# fingerprint, follows PYTHONHASHSEED; its output does not); `label` numbers the words of a set in
# its iteration order (the fingerprint and the output both follow PYTHONHASHSEED).
PIPELINE = textwrap.dedent(
    """\
    import sys
    from datasets import load_dataset

    STOP = frozenset({"the", "a", "an", "of", "to", "in", "on", "at"})
    IDS = {w: i for i, w in enumerate({"cat", "dog", "bird", "fish", "cow"})}

    def clean(ex):
        return {"t": " ".join(w for w in ex["t"].split() if w not in STOP)}

    def label(ex):
        return {"label": IDS[ex["t"].split()[1]]}

    ds = load_dataset("json", data_files="data.jsonl", split="train")
    cleaned = ds.map(clean)
    labelled = ds.map(label)
    print(cleaned._fingerprint, labelled._fingerprint)
    """
)


def _write(base: Path) -> None:
    animals = ["cat", "dog", "bird", "fish", "cow"]
    rows = (json.dumps({"t": f"the {animals[i % 5]} {i} of a house"}) for i in range(3000))
    (base / "data.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (base / "p.py").write_text(PIPELINE, encoding="utf-8")


def _table(root: Path, fp: str) -> pa.Table:
    (path,) = root.rglob(f"cache-{fp}.arrow")
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


def _run(cwd: Path, *args: str, env: dict[str, str], seed: str) -> subprocess.CompletedProcess[str]:
    """`cachetool run ARGS` in `cwd` under PYTHONHASHSEED=`seed`, forked from a warm parent started
    with that seed (`forks` starts one per value of it): its `str` hashes are those of a fresh
    interpreter under that seed."""
    return cachetool_run(*args, env={**env, "PYTHONHASHSEED": seed}, cwd=cwd, warm=True)


def test_a_map_whose_fingerprint_changed_for_nothing_is_rekeyed_and_one_whose_output_changed_is_not(
    tmp_path: Path,
) -> None:
    """Run with PYTHONHASHSEED=1, then with 2 and `--reuse-equivalent`: `clean` (a frozenset in its
    globals) is re-keyed from run 1's result, proven on its sampled batches, and said so at run
    time, by `explain --last`, `lineage` and `stats`; its file holds what a fresh run under seed 2
    computes, schema metadata (the new fingerprint) included, so `verify` is clean and the next run
    loads it. `label` (a set's order in its output) differs on the first batch: it computes, and
    its file is a fresh run's."""
    _write(tmp_path)
    env = hf_env(tmp_path)
    first = _run(tmp_path, "p.py", env=env, seed="1").stdout.split()
    proc = _run(tmp_path, "--reuse-equivalent", "p.py", env=env, seed="2")
    cleaned, labelled = proc.stdout.split()
    assert (cleaned, labelled) != tuple(first) and cleaned != first[0]
    said = f"cachetool: map @ p.py:14: re-keyed from {first[0]}, proven on 3 batches"
    assert said in proc.stderr, proc.stderr
    assert f"map @ p.py:15 not re-keyed from {first[1]}: rows 0-999 differ" in proc.stderr, proc.stderr

    # A fresh run under seed 2 in a cache of its own: what the re-keyed file must hold.
    fresh = tmp_path / "fresh"
    fresh_env = hf_env(fresh)
    fresh.mkdir(exist_ok=True)
    assert _run(tmp_path, "p.py", env=fresh_env, seed="2").stdout.split() == [cleaned, labelled]
    root = Path(env["HF_DATASETS_CACHE"])
    for fp in (cleaned, labelled):
        mine, theirs = _table(root, fp), _table(Path(fresh_env["HF_DATASETS_CACHE"]), fp)
        assert mine.schema.equals(theirs.schema, check_metadata=True) and mine.equals(theirs), fp

    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    reasons = {
        s["fingerprint"]: [r["kind"] for r in s["reasons"]] for s in doc["steps"] if s["operation"] == "map"
    }
    assert "rekeyed" in reasons[cleaned] and "rekeyed" not in reasons[labelled], reasons
    assert f"re-keyed from {first[0]}" in invoke("lineage", cleaned, env=env, columns=300).stdout
    assert invoke("verify", env=env).exit_code == 0
    stats = json.loads(invoke("stats", "--json", env=env).stdout)
    assert stats["given_back"]["rekey"]["steps"] == 1, stats["given_back"]

    again = _run(tmp_path, "p.py", env=env, seed="2")
    assert again.stdout.split() == [cleaned, labelled]
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    assert doc["computed"] == 0, doc


def test_tracing_reuse_equivalent_in_python_and_no_rekey_without_it(tmp_path: Path) -> None:
    """`cachetool.tracing(reuse_equivalent=True)` re-keys as the command does; a traced run without
    it computes (re-keying is opt-in)."""
    _write(tmp_path)
    env = hf_env(tmp_path)
    _run(tmp_path, "p.py", env=env, seed="1")
    plain = _run(tmp_path, "p.py", env=env, seed="2")
    assert "re-keyed" not in plain.stderr, plain.stderr
    script = (
        PIPELINE.replace("import sys\n", "import sys, cachetool\n")
        .replace(
            'ds = load_dataset("json"',
            'with cachetool.tracing(reuse_equivalent=True):\n    ds = load_dataset("json"',
        )
        .replace("\ncleaned = ", "\n    cleaned = ")
        .replace("\nlabelled = ", "\n    labelled = ")
    )
    (tmp_path / "q.py").write_text(script, encoding="utf-8")
    runs = [
        subprocess.run(
            [sys.executable, "q.py"],
            env={**env, "PYTHONHASHSEED": seed},
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        for seed in ("1", "3")
    ]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    (rekeyed,) = [line for line in runs[1].stderr.splitlines() if ": re-keyed from " in line]
    assert rekeyed.startswith("cachetool: map @ q.py:") and runs[0].stdout.split()[0] in rekeyed, rekeyed
