"""Throughput of `cachetool verify --deep` against `cat` of the same files, in one run.

Builds about `--size-gb` GB of real cache files with `datasets` (a `map` over generated rows of
mixed columns: ints, floats, short and long strings), warms the page cache, then times:

- `cat FILES > /dev/null` (the floor: every byte read once, nothing checked);
- `cachetool verify --deep` (every byte hashed with xxh3, every buffer validated in full:
  offsets, UTF-8, nulls), on all cores;
- `cachetool verify` (headers only), for scale;
- `cachetool verify --deep` of an empty cache (its start-up alone), to give the CPU seconds per
  GB of the deep read itself, next to `cat`'s.

Runs cat and verify --deep in back-to-back pairs (order alternating) and prints, per pair, the
wall time and the CPU time (user + system, all threads) of each, then the throughput ratio
cat/verify (higher is better; 1.0 means as fast as reading): its median, its min–max over the
pairs (the noise) and the load average. On a machine shared with other sessions the kernel
divides the cores between sessions (autogroup), so a loaded machine shows the CPU ratio rather
than the benefit of more threads: both are printed.

Then the same after `verify --deep --record` (a checksum stored for every file: each is hashed,
and validated again only if its bytes changed).

Above `IN_MEMORY_GB` the files are built from a generator (a prepared dataset, its `map` and a
`save_to_disk` of that: three copies streamed to disk, little memory) instead of a dataset held in
memory. Before and after the pairs the share of the files in the page cache is printed (mincore):
when the files do not fit (20 GB on a 23 GB machine shared with other work), both commands read
from the disk, and the ratio measures the disk and the read pattern, not the checking.

    python benchmarks/bench_verify.py [--size-gb 2] [--repeat 5] [--keep DIR]
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


#: Larger sizes are built by `BUILD_STREAMED` (the in-memory build holds half the size in memory).
IN_MEMORY_GB = 8.0

BUILD_STREAMED = """
import sys
from datasets import Dataset
rows = int(sys.argv[1])
def rows_of():
    for i in range(rows):
        yield {"id": i, "score": i * 0.5, "label": "label-%d" % (i % 17),
               "text": ("row %d " % i) * (20 + i % 40)}
ds = Dataset.from_generator(rows_of)
ds = ds.map(lambda b: {"n": [len(t) for t in b["text"]]}, batched=True, batch_size=10_000)
ds.save_to_disk(sys.argv[2] + "/saved", num_shards=max(1, rows // 500_000))
"""

#: Bytes on disk per row of one copy: the in-memory build writes two copies, the streamed three.
ROW_BYTES = {"in memory": 510, "streamed": 490}


def build(size_gb: float, root: Path, env: dict[str, str], in_memory: str) -> None:
    """About `size_gb` GB of real cache files under `root`: `in_memory` (a script taking the rows
    and the root, writing two copies) up to `IN_MEMORY_GB`, `BUILD_STREAMED` above."""
    streamed = size_gb > IN_MEMORY_GB
    how = "streamed" if streamed else "in memory"
    script, copies = (BUILD_STREAMED, 3) if streamed else (in_memory, 2)
    rows = int(size_gb * 1e9 / (copies * ROW_BYTES[how]))
    free = available_memory()
    if free is not None and free < size_gb * 1e9:
        print(
            f"note: {free / 1e9:.1f} GB of memory available for {size_gb:g} GB of files: they will not "
            "all stay in the page cache, and both commands will read from the disk"
        )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", script, str(rows), str(root)], check=True, env=env)
    print(f"built {rows:,} rows ({how}) in {time.perf_counter() - t0:.0f}s")


def available_memory() -> float | None:
    """Bytes the kernel says are available (page cache included), None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def resident(files: list[str]) -> float | None:
    """The share of the files' pages in the page cache (`mincore` of a map of each; mapping
    reads nothing), None where the system cannot say."""
    import ctypes
    import mmap

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        c = ctypes
        libc.mmap.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_int, c.c_int, c.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    page = mmap.PAGESIZE
    held = total = 0
    for name in files:
        size = os.path.getsize(name)
        if size == 0:
            continue
        pages = (size + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        fd = os.open(name, os.O_RDONLY)
        try:
            address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                if libc.mincore(address, size, vec) != 0:
                    return None
            finally:
                libc.munmap(address, size)
        finally:
            os.close(fd)
        held += pages - bytes(vec).count(0)
        total += pages
    return held / total if total else None


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the process and all its threads) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def paired(a: list[str], b: list[str], repeat: int, env: dict[str, str]) -> list[tuple[float, ...]]:
    """`repeat` pairs (a then b, b then a, ...): (a wall, a cpu, b wall, b cpu, load) each."""
    out = []
    for i in range(repeat):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        r1, r2 = timed(first, env), timed(second, env)
        ra, rb = (r1, r2) if i % 2 == 0 else (r2, r1)
        out.append((*ra, *rb, os.getloadavg()[0]))
    return out


def start_cost(empty: Path, env: dict[str, str], runs: int = 5) -> tuple[float, float]:
    """Wall and CPU seconds of `verify --deep` of an empty cache: start-up, imports, the scan
    (the fastest of `runs`, the least disturbed by the machine's other work)."""
    (empty / "cache").mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "cachetool", "verify", "--deep", "--cache-dir", str(empty / "cache")]
    got = [timed(cmd, env) for _ in range(runs)]
    return min(w for w, _ in got), min(c for _, c in got)


def cpu_summary(pairs: list[tuple[float, ...]], gb: float, start: tuple[float, float], cores: int) -> str:
    """CPU seconds per GB of `cat` and of the deep read (its start-up taken away), which a busy
    machine disturbs far less than wall time, and what they make of an idle machine at 20 GB:
    `cat` on one core, the deep read spread over every core after its start-up (on an idle
    machine each takes as long as its CPU time says)."""
    cat_cpu = statistics.median(cc for _, cc, _, _, _ in pairs) / gb
    deep_cpu = statistics.median(dc for _, _, _, dc, _ in pairs)
    reading = (deep_cpu - start[1]) / gb

    def idle(size: float) -> float:  # on an idle machine, the start-up's wall is its CPU
        return size * cat_cpu / (start[1] + size * reading / cores)

    return (
        f"CPU per GB: cat {cat_cpu:.3f} s, verify --deep reading {reading:.3f} s (its start-up "
        f"{start[1]:.2f} s of CPU, {start[0]:.2f} s wall); on {cores} idle cores, reads spread "
        f"over every core: about {idle(gb):.2f}× cat's throughput at {gb:.1f} GB, {idle(20):.2f}× at 20 GB"
    )


def measure(
    files: list[str], deep: list[str], repeat: int, env: dict[str, str], start: tuple[float, float], what: str
) -> None:
    """Print `repeat` pairs of `cat` and `deep`, their ratios and CPU per GB."""
    gb = sum(os.path.getsize(f) for f in files) / 1e9
    print(f"verify --deep{what}: {page_cache(files)} before the pairs")
    pairs = paired(["cat", *files], deep, repeat, env)
    print(f"{page_cache(files)} after them")
    print("pair   cat s  cat cpu  deep s  deep cpu  ratio  load")
    for n, (cw, cc, dw, dc, load) in enumerate(pairs, 1):
        print(f"{n:4} {cw:7.2f} {cc:8.2f} {dw:7.2f} {dc:9.2f} {cw / dw:6.2f} {load:5.1f}")
    ratios = [cw / dw for cw, _, dw, _, _ in pairs]
    cpu = [cc / dc for _, cc, _, dc, _ in pairs]
    best_cat = min(p[0] for p in pairs)
    best_deep = min(p[2] for p in pairs)
    print(
        f"verify --deep{what} / cat throughput at {gb:.2f} GB: median {statistics.median(ratios):.2f}, "
        f"min–max {min(ratios):.2f}–{max(ratios):.2f}; of the fastest runs {best_cat / best_deep:.2f} "
        f"(cat {gb / best_cat:.2f} GB/s, verify {gb / best_deep:.2f} GB/s); CPU ratio median "
        f"{statistics.median(cpu):.2f}; cores {os.cpu_count()}"
    )
    print(cpu_summary(pairs, gb, start, os.cpu_count() or 1))


def page_cache(files: list[str]) -> str:
    """How much of the files the page cache holds, in words."""
    share = resident(files)
    return "page cache share unknown" if share is None else f"{share:.0%} of the files in the page cache"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=5, help="pairs of runs")
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
            build(args.size_gb, root, env, BUILD)
        files = sorted(str(p) for p in root.rglob("*.arrow"))
        total = sum(os.path.getsize(f) for f in files)
        print(f"{len(files)} Arrow files, {total / 1e9:.2f} GB")
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        deep = [sys.executable, "-m", "cachetool", "verify", "--deep", "--cache-dir", str(root)]
        timed(deep, env)  # what a first run stores (schema verdicts) is there for the rest
        start = start_cost(base / "empty", env)
        (root / ".cachetool" / "checksums.json").unlink(missing_ok=True)  # a kept folder's record
        measure(files, deep, args.repeat, env, start, "")
        subprocess.run([*deep, "--record"], stdout=subprocess.DEVNULL, check=True, env=env)
        measure(files, deep, args.repeat, env, start, " (checksums recorded)")
        head = [sys.executable, "-m", "cachetool", "verify", "--cache-dir", str(root)]
        print(f"verify (headers only): {min(timed(head, env)[0] for _ in range(2)):.2f} s")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
