"""What does tracing cost? The worst case: 50 cheap maps that all hit the cache.

A cache hit is the fastest thing `datasets` does per step (hash the function, find the file,
memory-map it), so the tracer's fixed cost per record weighs the most there. In one process:

1. build a small csv dataset and run the 50-map pipeline once, untraced, to fill the cache;
2. alternate rounds untraced / traced in ABBA order (hooks installed and removed between rounds; traced rounds
   write their records to the real ledger of the temporary cache);
3. print the median round of each, microseconds per record, and the ratio (aim: at most 1.10).

Rounds are timed in CPU time of this process (`time.process_time`): the pipeline is single-threaded
here, and CPU time does not count what other processes on a busy machine take. Wall-clock medians
are printed too.

    python benchmarks/bench_trace.py [--maps 50] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def add(example: dict, k: int) -> dict:
    return {"v": example["x"] + k}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--maps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--rows", type=int, default=200)
    ns = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_trace-"))
    try:
        measure(ns, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the cache and the ledger it wrote


def measure(ns: argparse.Namespace, tmp: Path) -> None:
    """Build the cache in `tmp`, time the rounds, print the figures."""
    # datasets reads these at import: set them first, as a pipeline script would.
    os.environ["HF_DATASETS_CACHE"] = str(tmp / "cache")
    os.environ["CACHETOOL_HOME"] = str(tmp / "cachetool_home")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    import datasets
    from datasets import load_dataset

    from cachetool.history.ledger import read_ledger
    from cachetool.trace.install import active_tracer, install_tracing, uninstall_tracing

    datasets.logging.set_verbosity_error()
    data = tmp / "data.csv"
    data.write_text("x\n" + "".join(f"{i}\n" for i in range(ns.rows)), encoding="utf-8")
    source = load_dataset("csv", data_files=str(data), split="train")

    def pipeline() -> tuple[float, float]:
        start, wall = time.process_time(), time.perf_counter()
        ds = source
        for k in range(ns.maps):
            ds = ds.map(add, fn_kwargs={"k": k})
        return time.process_time() - start, time.perf_counter() - wall

    pipeline()  # fill the cache: every later map is a hit
    times: dict[str, list[float]] = {"untraced": [], "traced": []}
    walls: dict[str, list[float]] = {"untraced": [], "traced": []}
    for i in range(ns.rounds):
        # ABBA order, so that neither mode always runs right after the other (caches, GC).
        for mode in ("untraced", "traced") if i % 2 == 0 else ("traced", "untraced"):
            if mode == "traced":
                install_tracing()
                assert active_tracer() is not None
            cpu, wall = pipeline()
            times[mode].append(cpu)
            walls[mode].append(wall)
            if mode == "traced":
                uninstall_tracing()

    records = [r for r in read_ledger(tmp / "cache").steps() if r.operation == "map"]
    assert len(records) == ns.maps * ns.rounds, len(records)
    assert all(r.cache == "hit" for r in records)
    plain = statistics.median(times["untraced"])
    traced = statistics.median(times["traced"])
    per_record_us = (traced - plain) / ns.maps * 1e6
    print(
        f"datasets {datasets.__version__}, Python {sys.version.split()[0]}, {ns.maps} cached maps, "
        f"{ns.rounds} rounds each (medians)"
    )
    wall_plain, wall_traced = statistics.median(walls["untraced"]), statistics.median(walls["traced"])
    print(
        f"untraced: {plain * 1e3:8.1f} ms CPU  ({plain / ns.maps * 1e6:7.0f} us per map)  "
        f"wall {wall_plain * 1e3:.1f} ms"
    )
    print(
        f"traced:   {traced * 1e3:8.1f} ms CPU  ({traced / ns.maps * 1e6:7.0f} us per map)  "
        f"wall {wall_traced * 1e3:.1f} ms"
    )
    print(
        f"tracing cost: {per_record_us:.0f} us per record; ratio traced/untraced = {traced / plain:.3f} "
        f"(wall {wall_traced / wall_plain:.3f})"
    )


if __name__ == "__main__":
    main()
