"""How fast is `cachetool ls` on a large cache, against a floor and a naive approach?

Synthesizes a cache of N small Arrow files (default 20,000) in 200 dataset folders, named and
tagged as `datasets` 5.x writes them (`cache-<fp>.arrow` with the `huggingface` metadata, source
splits, dataset_info.json, and the three locks `load_dataset` leaves per dataset folder), then
times in the same run:

- floor:  a Python `os.scandir` + `stat` walk of the same tree (what any listing must pay);
- naive:  opening every Arrow file and reading all its batches with pyarrow;
- cachetool ls --json, cold (no read index) and warm (index present, files unchanged).

and `cachetool --version` against `python -c "import typer"`. Prints medians and ratios, and the
CPU time of each process (with that of listing an empty folder: what start-up and imports cost).
"Cold" means cachetool's own index is absent; the OS page cache is warm for every contender.

    python benchmarks/bench_ls.py [--files 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path


def derived(root: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where listings of `root` keep what makes the next one faster (the read index): the user's
    cache folder for that root, never the root."""
    from cachetool.cache.locations import derived_dir

    return derived_dir(root, env) or root / "no-such-folder"


def synthesize(root: Path, files: int, folders: int = 200) -> None:
    import pyarrow as pa

    per_folder = files // folders
    features = {"id": {"dtype": "int64", "_type": "Value"}, "text": {"dtype": "string", "_type": "Value"}}
    batch = pa.record_batch(
        [pa.array(range(64)), pa.array([f"row {i}" for i in range(64)])], names=["id", "text"]
    )
    for d in range(folders):
        folder = root / f"ds{d:03d}" / f"default-{d:016x}" / "0.0.0" / f"{d:064x}"
        folder.mkdir(parents=True)
        # The locks every load_dataset leaves (filelock never deletes them on Linux).
        (folder.parent / f"{folder.name}_builder.lock").write_bytes(b"")
        (folder.parent / f"{folder.name}.incomplete_info.lock").write_bytes(b"")
        (root / (str(folder.resolve()).replace("/", "_") + ".lock")).write_bytes(b"")
        (folder / "dataset_info.json").write_text(
            json.dumps(
                {"splits": {"train": {"name": "train", "num_examples": 128, "dataset_name": f"ds{d:03d}"}}}
            )
        )
        # Each file written by pyarrow once per folder, then as bytes with its own fingerprint.
        source, template = (_stream(batch, features, fp) for fp in (None, _MARK))
        (folder / f"ds{d:03d}-train.arrow").write_bytes(source)
        for i in range(1, per_folder):
            fp = f"{d:04x}{i:012x}"
            (folder / f"cache-{fp}.arrow").write_bytes(template.replace(_MARK.encode(), fp.encode()))


_MARK = "F" * 16  # as long as the fingerprints `synthesize` gives


def _stream(batch: object, features: dict[str, object], fp: str | None) -> bytes:
    """An Arrow stream of two batches, tagged as `datasets` tags it (with `fp`, if any)."""
    import pyarrow as pa

    meta: dict[str, object] = {"info": {"features": features}}
    if fp:
        meta["fingerprint"] = fp
    schema = batch.schema.with_metadata({"huggingface": json.dumps(meta)})  # type: ignore[attr-defined]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        w.write_batch(batch.replace_schema_metadata(schema.metadata))  # type: ignore[attr-defined]
        w.write_batch(batch.replace_schema_metadata(schema.metadata))  # type: ignore[attr-defined]
    return bytes(sink.getvalue().to_pybytes())


def floor_walk(root: Path) -> int:
    n = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for de in it:
                st = de.stat(follow_symlinks=False)
                if de.is_dir(follow_symlinks=False):
                    stack.append(de.path)
                else:
                    n += st.st_size > -1
    return n


def naive_read(root: Path) -> int:
    import pyarrow as pa

    rows = 0
    for path in root.rglob("*.arrow"):
        with pa.memory_map(str(path)) as source:
            rows += pa.ipc.open_stream(source).read_all().num_rows
    return rows


def timed(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def cpu_timed(fn: Callable[[], object], repeat: int) -> float:
    """Median CPU seconds (user + system) of the processes `fn` runs: on a shared machine they
    tell the listing's own work apart from the others' better than wall time."""
    samples = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        fn()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(samples)


def run_cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "cachetool", *args], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="bench-ls-"))
    root = base / "cache"
    try:
        t0 = time.perf_counter()
        synthesize(root, args.files)
        print(f"synthesized {args.files} files in 200 folders in {time.perf_counter() - t0:.1f}s")

        floor = timed(lambda: floor_walk(root), args.repeat)
        naive = timed(lambda: naive_read(root), args.repeat)

        def cold() -> None:
            shutil.rmtree(derived(root), ignore_errors=True)  # the read index
            run_cli("ls", str(root), "--json")

        cold_t = timed(cold, args.repeat)
        run_cli("ls", str(root), "--json")  # make sure the index exists
        warm_t = timed(lambda: run_cli("ls", str(root), "--json"), args.repeat)
        walk_cpu = cpu_timed(
            lambda: subprocess.run(
                [sys.executable, "-c", f"import bench_ls; bench_ls.floor_walk({str(root)!r})"],
                check=True,
                cwd=Path(__file__).parent,
            ),
            args.repeat,
        )
        cold_cpu = cpu_timed(cold, args.repeat)
        run_cli("ls", str(root), "--json")
        warm_cpu = cpu_timed(lambda: run_cli("ls", str(root), "--json"), args.repeat)

        empty = base / "empty"
        empty.mkdir()
        empty_cpu = cpu_timed(lambda: run_cli("ls", str(empty), "--json"), args.repeat)
        version_t = timed(lambda: run_cli("--version"), args.repeat + 2)
        typer_t = timed(
            lambda: subprocess.run([sys.executable, "-c", "import typer"], check=True), args.repeat + 2
        )

        print(f"{'contender':34} {'median s':>9} {'vs floor':>9} {'vs naive':>9}")
        for name, t in [
            ("floor: scandir + stat walk", floor),
            ("naive: open + read all batches", naive),
            ("cachetool ls --json (cold)", cold_t),
            ("cachetool ls --json (warm)", warm_t),
        ]:
            print(f"{name:34} {t:9.3f} {t / floor:9.2f} {t / naive:9.2f}")
        print(
            f"CPU s: walk process {walk_cpu:.3f}, ls cold {cold_cpu:.3f} ({cold_cpu / walk_cpu:.1f}×), "
            f"warm {warm_cpu:.3f} ({warm_cpu / walk_cpu:.1f}×); "
            f"ls --json of an empty folder (start-up and imports) {empty_cpu:.3f}"
        )
        print(
            f"{'cachetool --version':34} {version_t:9.3f}   vs `python -c 'import typer'` "
            f"{typer_t:.3f}s: ratio {version_t / typer_t:.2f}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
