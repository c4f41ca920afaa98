"""What does `--reuse-equivalent` cost against the recompute it replaces?

The frozenset-in-closure pipeline: a batched map over 1,000,000 rows of text drops stop words held
in a frozenset captured by a closure, so its fingerprint follows PYTHONHASHSEED while its output
does not. Run 1 (PYTHONHASHSEED=1) computes it; run 2 (PYTHONHASHSEED=2) is a new session: once as
a plain traced run (the baseline: a full recompute) and once, on a copy of run 1's cache, with
`cachetool run --reuse-equivalent` (8 sampled batches computed again, then the earlier file copied
under the new fingerprint). Printed: the map step's time as the ledger records it and each run's
wall time, the ratio re-key / recompute (goal: at most 0.10), and whether the re-keyed file equals
the recomputed one (`Table.equals`, schema metadata included). `--repeat` runs the pair again and
prints the median and spread of the ratio.

`--corpus` runs every pipeline of the project's determinism corpus (tests/corpus) instead: under
PYTHONHASHSEED=1, then under 2 with `--reuse-equivalent`, and under 2 in a fresh cache (the
truth); every `cache-*.arrow` the re-keying run holds must equal the fresh run's file of the same
name. Printed: the steps re-keyed, and the wrong re-keys (goal: 0). Controls whose culprit does
change the output (a label mapping built from a set's order, a shuffle seeded from time) must
compute.

    python benchmarks/bench_rekey.py [--rows 1000000] [--repeat 3]
    python benchmarks/bench_rekey.py --corpus
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIPELINE = """\
from datasets import load_dataset

WORDS = ["a", "an", "the", "of", "to", "in", "on", "and", "or", "is", "it", "at", "by", "for"]


def make_cleaner():
    stop = frozenset(WORDS)

    def clean(batch):
        return {"text": [" ".join(w for w in t.split() if w not in stop) for t in batch["text"]]}

    return clean


ds = load_dataset("json", data_files="data.jsonl", split="train")
print(ds.map(make_cleaner(), batched=True, batch_size=1000)._fingerprint)
"""


def env_for(base: Path, cache: Path, seed: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_"))}
    env.update(
        HF_DATASETS_CACHE=str(cache),
        HF_HOME=str(base / "hf_home"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        CACHETOOL_HOME=str(base / "cachetool_home"),
        PYTHONHASHSEED=seed,
    )
    return env


def run(base: Path, env: dict[str, str], *flags: str) -> tuple[str, float, float]:
    """(the map's fingerprint, its recorded duration, the run's wall time)."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "cachetool", "run", *flags, "p.py"],
        env=env,
        cwd=base,
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "cachetool", "explain", "--last", "--json"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    (step,) = [s for s in doc["steps"] if s["operation"] == "map"]
    return out.stdout.split()[-1], step["duration"], wall


def table(cache: Path, fp: str) -> object:
    import pyarrow as pa

    (path,) = cache.rglob(f"cache-{fp}.arrow")
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--corpus", action="store_true")
    ns = parser.parse_args()
    if ns.corpus:
        corpus()
        return
    base = Path(tempfile.mkdtemp(prefix="bench_rekey-"))
    try:
        words = ["the", "cat", "sat", "on", "a", "mat", "in", "the", "garden", "of", "old", "trees"]
        with open(base / "data.jsonl", "w", encoding="utf-8") as f:
            for i in range(ns.rows):
                f.write(json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(12))}) + "\n")
        (base / "p.py").write_text(PIPELINE, encoding="utf-8")
        first = base / "first"
        run(base, env_for(base, first, "1"))  # run 1: computes
        ratios, walls = [], []
        for r in range(ns.repeat):
            plain, rekeyed = base / f"plain-{r}", base / f"rekeyed-{r}"
            shutil.copytree(first, plain, symlinks=True)
            shutil.copytree(first, rekeyed, symlinks=True)
            fp, full, full_wall = run(base, env_for(base, plain, "2"))
            fp2, cheap, cheap_wall = run(base, env_for(base, rekeyed, "2"), "--reuse-equivalent")
            a, b = table(plain, fp), table(rekeyed, fp2)
            same = fp == fp2 and a.equals(b) and a.schema.equals(b.schema, check_metadata=True)  # type: ignore[attr-defined]
            ratios.append(cheap / full)
            walls.append(cheap_wall / full_wall)
            print(
                f"pair {r + 1}: map recompute {full:.2f} s, re-key {cheap:.2f} s, ratio {cheap / full:.3f}; "
                f"run wall {full_wall:.2f} s vs {cheap_wall:.2f} s ({cheap_wall / full_wall:.2f}); "
                f"files equal: {'yes' if same else 'NO'}"
            )
            shutil.rmtree(plain)
            shutil.rmtree(rekeyed)
        print(
            f"\n{ns.rows:,} rows: re-key / recompute of the map: median {statistics.median(ratios):.3f} "
            f"(spread {min(ratios):.3f}-{max(ratios):.3f}; goal <= 0.10); whole run: median "
            f"{statistics.median(walls):.2f}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def corpus() -> None:
    """Every corpus pipeline: re-keyed steps, and re-keyed files that differ from the truth."""
    import pyarrow as pa

    folder = Path(__file__).resolve().parent.parent / "tests" / "corpus"
    scripts = sorted(p.name for p in folder.glob("[a-z]*[0-9]_*.py") if p.name != "corpus_data.py")
    base = Path(tempfile.mkdtemp(prefix="bench_rekey_corpus-"))
    rekeyed = wrong = 0
    try:
        for name in scripts:
            mine, truth = base / name / "mine", base / name / "truth"

            def go(cache: Path, seed: str, *flags: str, script: str = name) -> str:
                return subprocess.run(
                    [sys.executable, "-m", "cachetool", "run", *flags, script],
                    env=env_for(base / script, cache, seed),
                    cwd=folder,
                    capture_output=True,
                    text=True,
                    timeout=600,
                ).stderr

            go(mine, "1")
            said = go(mine, "2", "--reuse-equivalent")
            go(truth, "2")
            n = said.count(": re-keyed from ")
            bad = []
            for path in mine.rglob("cache-*.arrow"):
                twin = next(truth.rglob(path.name), None)
                if twin is None:
                    continue
                with pa.memory_map(str(path)) as a, pa.memory_map(str(twin)) as b:
                    if not pa.ipc.open_stream(a).read_all().equals(pa.ipc.open_stream(b).read_all()):
                        bad.append(path.name)
            rekeyed += n
            wrong += bool(bad and n)
            print(f"{name:<45} re-keyed {n}  {'WRONG: ' + ', '.join(bad) if bad and n else ''}")
            shutil.rmtree(base / name, ignore_errors=True)
        print(f"\n{len(scripts)} pipelines: {rekeyed} steps re-keyed, {wrong} with a wrong re-key (goal 0)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
