"""What does `cachetool check-determinism` cost, against one plain run of the pipeline?

A CPU-bound pipeline (`load_dataset` of a JSON Lines file, a `map` that tokenizes and scores N
rows, a `filter`, a second `map`) is timed, in the same benchmark, as:

- plain:     `python pipeline.py` once, from an empty cache (what the user pays anyway);
- default:   `cachetool check-determinism pipeline.py` from an empty cache: 2 runs, one after the
             other, on the same cache, so run 2 reuses run 1's files;
- isolated:  `cachetool check-determinism pipeline.py --isolated`: 2 runs in parallel, each on a
             fresh temporary cache.

Prints each median and best time with its ratio to plain (aim: under 1.3 for both on 2 cores).
What to expect: default costs one plain run plus one fully cached run (interpreter start, the
`datasets` import, cache lookups: about 2 s), so its ratio falls as the pipeline grows; isolated
costs the slower of two runs sharing the cores (near 1 on an idle 2-core machine; any other load
on the machine shows up here first). Tracing and hash trees themselves cost about 0.1 s a run.

    python benchmarks/bench_determinism.py [--rows 80000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIPELINE = """
import sys
from datasets import load_dataset


def score(example):
    words = example["text"].split()
    total = 0
    for w in words:
        for ch in w:
            total = (total * 31 + ord(ch)) % 1_000_003
    return {"n_words": len(words), "score": total}


ds = load_dataset("json", data_files=sys.argv[1], split="train")
ds = ds.map(score)
ds = ds.filter(lambda ex: ex["score"] % 3 != 0)
ds = ds.map(lambda ex: {"bucket": ex["n_words"] // 4})
print(ds._fingerprint, len(ds))
"""

VOCAB = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


def write_rows(path: Path, rows: int) -> None:
    """The pipeline's input: a JSON Lines file, so that `datasets` caches every step on disk."""
    import json

    with open(path, "w") as f:
        for i in range(rows):
            text = " ".join(VOCAB[(i * k) % len(VOCAB)] for k in range(1, 25))
            f.write(json.dumps({"id": i, "text": text}) + "\n")


def env_for(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_", "PYTHONHASHSEED"))}
    env.update(
        HF_HOME=str(base / "hf_home"),
        HF_DATASETS_CACHE=str(base / "cache"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
    )
    return env


def timed(cmd: list[str], env: dict[str, str], cwd: Path, expect: int = 0) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != expect:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=80_000)
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-determinism-"))
    try:
        script = work / "pipeline.py"
        script.write_text(PIPELINE)
        data = work / "rows.jsonl"
        write_rows(data, opts.rows)
        cachetool = [sys.executable, "-m", "cachetool", "check-determinism", str(script)]
        contenders = {
            "plain": [sys.executable, str(script), str(data)],
            "default": [*cachetool, "--", str(data)],
            "isolated": [*cachetool, "--isolated", "--jobs", "2", "--", str(data)],
        }
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for i in range(opts.repeat):
            for name, cmd in contenders.items():
                base = work / f"{name}-{i}"  # an empty cache for every measurement
                base.mkdir()
                times[name].append(timed(cmd, env_for(base), work))
                shutil.rmtree(base, ignore_errors=True)
        plain = statistics.median(times["plain"])
        plain_best = min(times["plain"])
        print(f"pipeline: {opts.rows} rows, {os.cpu_count()} cores, {opts.repeat} rounds")
        # The best round is shown too: on a shared machine it is the least disturbed one.
        for name, values in times.items():
            median, best = statistics.median(values), min(values)
            each = ", ".join(f"{v:.2f}" for v in values)
            print(
                f"{name:9s} median {median:6.2f} s  ratio {median / plain:4.2f}   "
                f"best {best:6.2f} s  ratio {best / plain_best:4.2f}   ({each})"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
