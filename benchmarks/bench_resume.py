"""How much of a killed map does a traced rerun give back, and is the result always right?

A 200,000-row map (one example at a time, batched, and batched over `num_proc=2` workers, in
turn) run under `cachetool run`, SIGKILLed (with its workers) at a random row between 60% and 90%
of the map, then run again under `cachetool run`. Per kill it prints the rows the killed run had
completed (the complete record batches of its `tmp*` files), the rows the rerun reused (from the
ledger, as `explain --last` says them), their ratio (goal: at least 0.90), the rerun's wall time
against an uninterrupted run's (the baseline, timed in the same loop), and whether the final
files equal the uninterrupted run's (`Table.equals`, schema metadata included; goal: 0
differences). The baseline cache is made once per mode.

    python benchmarks/bench_resume.py [--kills 20] [--rows 200000] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIPELINE = """\
import os, sys, time
from pathlib import Path
from datasets import load_dataset

def f(ex, idx):
    at = int(os.environ.get("KILL_AT", -1))
    last = idx[-1] if isinstance(idx, list) else idx
    if 0 <= at <= last:
        Path(sys.argv[2]).write_text("busy")
        time.sleep(0.01)
    if isinstance(idx, list):
        return {"y": [x * 2 + i for x, i in zip(ex["x"], idx)], "s": [str(i) for i in idx]}
    return {"y": ex["x"] * 2 + idx, "s": str(idx)}

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
ds = ds.map(f, with_indices=True, MAP_ARGS)
print("finished", ds._fingerprint)
"""

MODES = {
    "examples": "writer_batch_size=500",
    "batched": "batched=True, batch_size=700",
    "num_proc=2": "batched=True, batch_size=700, num_proc=2",
}


def env_for(base: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_"))}
    env.update(
        HF_DATASETS_CACHE=str(cache),
        HF_HOME=str(base / "hf_home"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        CACHETOOL_HOME=str(base / "cachetool_home"),
    )
    return env


def run(base: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", "-"],
        env=env,
        cwd=base,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def run_and_kill(base: Path, env: dict[str, str]) -> None:
    """Start the pipeline, SIGKILL its process group once the map says it is past KILL_AT."""
    marker = base / "busy"
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", str(marker)],
        env=env,
        cwd=base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the pipeline ended before it was killed")
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def tables(cache: Path) -> dict[str, object]:
    import pyarrow as pa

    out = {}
    for p in sorted(cache.rglob("cache-*.arrow")):
        with pa.memory_map(str(p)) as source:
            out[p.name] = pa.ipc.open_stream(source).read_all()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=None)
    ns = parser.parse_args()
    rng = random.Random(ns.seed)
    from cachetool.cache.arrow import read_summary

    base = Path(tempfile.mkdtemp(prefix="bench_resume-"))
    try:
        (base / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(ns.rows)), encoding="utf-8")
        reference: dict[str, tuple[dict[str, object], float]] = {}
        ratios, speed, wrong = [], [], 0
        print(
            f"{'kill':>4}  {'mode':<10} {'killed at':>9} {'completed':>9} {'reused':>8} {'ratio':>6} "
            f"{'rerun/full':>10}  equal"
        )
        for k in range(ns.kills):
            mode = list(MODES)[k % len(MODES)]
            (base / "p.py").write_text(PIPELINE.replace("MAP_ARGS", MODES[mode]), encoding="utf-8")
            if mode not in reference:
                ref = base / f"reference-{len(reference)}"
                full = run(base, env_for(base, ref))
                reference[mode] = (tables(ref), full)
            cache = base / f"cache-{k}"
            env = env_for(base, cache)
            kill_at = rng.randrange(int(ns.rows * 0.6), int(ns.rows * 0.9))
            run_and_kill(base, {**env, "KILL_AT": str(kill_at)})
            completed = sum(read_summary(p).rows or 0 for p in cache.rglob("tmp*"))
            again = run(base, env)
            doc = json.loads(
                subprocess.run(
                    [sys.executable, "-m", "cachetool", "explain", "--last", "--json"],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            said = [r["message"] for s in doc["steps"] for r in s["reasons"] if r["kind"] == "resumed"]
            reused = int(said[0].split()[1].replace(",", "")) if said else 0
            want, full = reference[mode]
            got = tables(cache)
            equal = got.keys() == want.keys() and all(
                got[n].equals(want[n]) and got[n].schema.equals(want[n].schema, check_metadata=True)
                for n in want
            )
            wrong += not equal
            ratio = reused / completed if completed else 0.0
            ratios.append(ratio)
            speed.append(again / full)
            print(
                f"{k + 1:>4}  {mode:<10} {kill_at:>9,} {completed:>9,} {reused:>8,} {ratio:>6.3f} "
                f"{again / full:>10.2f}  {'yes' if equal else 'NO'}"
            )
            shutil.rmtree(cache, ignore_errors=True)
        print(
            f"\nreused / completed: median {statistics.median(ratios):.3f}, min {min(ratios):.3f} "
            f"(goal >= 0.90); rerun / uninterrupted wall time: median {statistics.median(speed):.2f} "
            f"(spread {min(speed):.2f}-{max(speed):.2f}); differences: {wrong} of {ns.kills} (goal 0)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
