"""Throughput of `cachetool verify --deep` against `cat` of the same files, in one run.

Builds about `--size-gb` GB of real cache files with `datasets` (a `map` over generated rows of
mixed columns: ints, floats, short and long strings), warms the page cache, then times:

- `cat FILES > /dev/null` (the floor: every byte read once, nothing checked);
- `cachetool verify --deep` (every byte hashed with xxh3, every buffer validated in full:
  offsets, UTF-8, nulls), on all cores;
- `cachetool verify` (headers only), for scale.

Prints GB/s and the ratio verify/cat (higher is better; 1.0 means as fast as reading).

    python benchmarks/bench_verify.py [--size-gb 2] [--repeat 3] [--keep DIR]
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

BUILD = """
import sys
from datasets import Dataset
rows = int(sys.argv[1])
n = 200_000
def gen(start):
    return {"id": list(range(start, start + n)),
            "score": [i * 0.5 for i in range(start, start + n)],
            "label": ["label-%d" % (i % 17) for i in range(start, start + n)],
            "text": [("row %d " % i) * (20 + i % 40) for i in range(start, start + n)]}
parts = []
from datasets import concatenate_datasets
for start in range(0, rows, n):
    part = Dataset.from_dict(gen(start))
    parts.append(part)
ds = concatenate_datasets(parts)
ds.save_to_disk(sys.argv[2] + "/saved", num_shards=8)
from datasets import load_from_disk
ds = load_from_disk(sys.argv[2] + "/saved")
ds = ds.map(lambda b: {"n": [len(t) for t in b["text"]]}, batched=True, batch_size=10_000)
"""


def timed(cmd: list[str], repeat: int, env: dict[str, str]) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, env=env)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="build into (and reuse) this folder")
    args = parser.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    root = base / "cache"
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(root),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "CACHETOOL_HOME": str(base / "home"),
    }
    try:
        if not (root / "saved" / "state.json").exists():
            # About 1 KB a row on disk, saved copy and the map's copy together.
            rows = int(args.size_gb * 1e9 / 1020)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", BUILD, str(rows), str(root)], check=True, env=env)
            print(f"built {rows:,} rows in {time.perf_counter() - t0:.0f}s")
        files = sorted(str(p) for p in root.rglob("*.arrow"))
        total = sum(os.path.getsize(f) for f in files)
        print(f"{len(files)} Arrow files, {total / 1e9:.2f} GB")
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        cat_t = timed(["cat", *files], args.repeat, env)
        deep_t = timed(
            [sys.executable, "-m", "cachetool", "verify", "--deep", "--cache-dir", str(root)],
            args.repeat,
            env,
        )
        head_t = timed(
            [sys.executable, "-m", "cachetool", "verify", "--cache-dir", str(root)], args.repeat, env
        )
        print(f"{'contender':34} {'median s':>9} {'GB/s':>7} {'vs cat':>7}")
        for name, t in [
            ("cat > /dev/null", cat_t),
            ("cachetool verify --deep", deep_t),
            ("cachetool verify (headers only)", head_t),
        ]:
            print(f"{name:34} {t:9.3f} {total / 1e9 / t:7.2f} {cat_t / t:7.2f}")
        print(f"throughput ratio verify --deep / cat: {cat_t / deep_t:.2f} (cores: {os.cpu_count()})")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
