"""What does `cachetool run --once` save? N ranks (default 8) start one pipeline together on one
shared cache: a map that costs about a second of CPU, a filter and a shuffle, each rank under
`cachetool run` (every rank computes what it finds missing: the miss storm) against the same
ranks under `cachetool run --once` (one computes, the others wait and load).

Pairs in alternating order, each on a fresh cache, timed once every rank has imported `datasets`.
Per mode: the wall time until the last rank ends, the CPU time of all ranks (each rank's own), and
how many times the map's function ran a whole computation; then the median ratio once/plain with its spread
(min–max: the noise of this machine now). The goal: the CPU of all ranks at most 2/N of
theirs without `--once` (one computes; the others wait and load).

    python benchmarks/bench_once.py [--ranks 8] [--pairs 3] [--rows 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

PIPELINE = textwrap.dedent(
    """
    import hashlib, os, sys, time
    from pathlib import Path

    from datasets import load_dataset

    work = Path(sys.argv[1])
    (work / f"ready-{os.getpid()}").touch()
    while not (work / "go").exists():
        time.sleep(0.005)
    cpu = time.process_time()

    def digest(batch):
        if batch["x"][0] == 0:
            with open(work / "computed", "a") as f:
                f.write(f"{os.getpid()}\\n")
        return {"h": [hashlib.sha256(str(x).encode() * 1000).hexdigest()[:8] for x in batch["x"]]}

    ds = load_dataset("csv", data_files=str(work / "data.csv"), split="train")
    ds = ds.map(digest, batched=True).filter(lambda b: [h < "8" for h in b["h"]], batched=True)
    ds = ds.shuffle(seed=0)
    with open(work / "cpu", "a") as f:
        f.write(f"{time.process_time() - cpu}\\n")
    """
)


def ranks_once(work: Path, ranks: int, once: bool) -> tuple[float, float, int]:
    """(wall seconds from the go until the last rank ends, CPU seconds of all ranks over that
    time, computations of the map)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_"))}
    env |= {
        "HF_DATASETS_CACHE": str(work / "cache"),
        "HF_HOME": str(work / "hf_home"),
        "CACHETOOL_HOME": str(work / "cachetool_home"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    run = [sys.executable, "-m", "cachetool", "run", *(["--once"] if once else [])]
    procs = [subprocess.Popen([*run, str(work / "p.py"), str(work)], env=env) for _ in range(ranks)]
    while len(list(work.glob("ready-*"))) < ranks:  # every rank imported datasets: start-up is not timed
        if any(p.poll() for p in procs):
            raise SystemExit("a rank failed")
        time.sleep(0.05)
    t0 = time.perf_counter()
    (work / "go").touch()
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit(f"a rank failed ({proc.returncode})")
    wall = time.perf_counter() - t0
    cpu = sum(float(x) for x in (work / "cpu").read_text().split())
    computed = len((work / "computed").read_text().split()) if (work / "computed").exists() else 0
    return wall, cpu, computed


def measure(base: Path, ranks: int, rows: int, pairs: int) -> list[dict[str, Any]]:
    """The rows of `run_all.py --only once`: CPU and wall of the ranks under `--once` against
    without, and the computations of the map (goal: one)."""
    results: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
    for i in range(pairs):
        for once in (False, True) if i % 2 == 0 else (True, False):
            work = base / f"once-{i}-{once}"
            work.mkdir(parents=True)
            (work / "p.py").write_text(PIPELINE)
            (work / "data.csv").write_text("x\n" + "".join(f"{x}\n" for x in range(rows)))
            results[once].append(ranks_once(work, ranks, once))
            shutil.rmtree(work, ignore_errors=True)
    out = []
    for what, k in (("CPU", 1), ("wall", 0)):
        ratios = [o[k] / p[k] for p, o in zip(results[False], results[True], strict=True)]
        r = statistics.median(ratios)
        plain, once = (statistics.median(x[k] for x in results[m]) for m in (False, True))
        out.append(
            dict(
                what=f"run --once / run, {ranks} ranks on one cache, {what} after imports",
                ratio=r,
                low=min(ratios),
                high=max(ratios),
                goal="" if k == 0 else f"≤ {2 / ranks:.2f}",
                met=None if k == 0 else r <= 2 / ranks,
                detail=f"run {plain:.2f}s, --once {once:.2f}s"
                + ("" if k == 0 else f"; the map computed {_counts(results)}"),
            )
        )
    return out


def _counts(results: dict[bool, list[tuple[float, float, int]]]) -> str:
    plain, once = ("/".join(str(x[2]) for x in results[m]) for m in (False, True))
    return f"{plain} times by run, {once} by --once"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000)
    ns = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench_once-"))
    try:
        for row in measure(base, ns.ranks, ns.rows, ns.pairs):
            print(f"{row['what']}: {row['ratio']:.2f} ({row['low']:.2f}–{row['high']:.2f}) {row['goal']}")
            print(f"    {row['detail']}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
