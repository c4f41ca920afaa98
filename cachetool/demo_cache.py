"""A small, real `datasets` cache built from generated data: the newcomer's first look.

`build_demo(folder)` writes a CSV file, then runs, with the real `datasets` library, a pipeline
that leaves one entry of each everyday kind in `<folder>/cache`: a csv load (source split),
maps (derived data), a filter and a shuffle (indices), a `num_proc=2` map (a shard set) and a
`save_to_disk` folder. The demo pipeline is also a plain script (`DEMO_SCRIPT`), so it can be run
under `cachetool run` and `cachetool check-determinism`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cachetool.errors import CachetoolError, MissingDependency

DEMO_SCRIPT = '''\
"""cachetool demo pipeline: load a CSV, then map, filter, shuffle, a num_proc map and a save."""
import os
import sys

from datasets import load_dataset

here = os.path.dirname(os.path.abspath(__file__))
csv_path = os.path.join(here, "reviews.csv")


def add_length(example):
    example["length"] = len(example["text"])
    return example


def is_long(example):
    return example["length"] > 20


def upper(batch):
    return {"text_upper": [t.upper() for t in batch["text"]]}


if __name__ == "__main__":
    ds = load_dataset("csv", data_files=csv_path, split="train")
    ds = ds.map(add_length)
    ds = ds.filter(is_long)
    ds = ds.shuffle(seed=42)
    ds = ds.flatten_indices()
    ds = ds.map(upper, batched=True, num_proc=2)
    ds.save_to_disk(os.path.join(here, "saved", "reviews"))
    print(ds._fingerprint)
'''

_WORDS = ["good", "bad", "great", "terrible", "fine", "awful", "superb", "meh", "lovely", "dull"]


@dataclass(frozen=True)
class Demo:
    """Where the demo put things."""

    folder: Path
    cache_dir: Path
    script: Path
    final_fingerprint: str


#: The modification time the demo's CSV gets (2024-01-01 UTC): `datasets` hashes a data file's
#: path and mtime into the fingerprints, so a demo built again in the same folder makes the same
#: fingerprints and reuses its cache.
DEMO_MTIME = 1704067200


def write_demo_files(folder: Path, rows: int = 400) -> Path:
    """Write the CSV input (modified at `DEMO_MTIME`) and the pipeline script into `folder`;
    returns the script's path."""
    folder.mkdir(parents=True, exist_ok=True)
    csv, script = folder / "reviews.csv", folder / "pipeline.py"
    lines = ["id,text,label\n"]
    for i in range(rows):
        words = " ".join(_WORDS[(i * k + 3) % len(_WORDS)] for k in range(1 + i % 7))
        lines.append(f"{i},review {i}: {words},{i % 2}\n")
    for path, text in ((csv, "".join(lines)), (script, DEMO_SCRIPT)):
        try:  # a file of the user's is never replaced; an earlier demo's is written again
            theirs = path.read_bytes() != text.encode()
        except FileNotFoundError:
            theirs = False
        except OSError:
            theirs = True
        if theirs:
            raise CachetoolError(f"{path} exists and is not the demo's: give the demo a folder of its own")
    csv.write_text("".join(lines), encoding="utf-8")
    os.utime(csv, (DEMO_MTIME, DEMO_MTIME))
    script.write_text(DEMO_SCRIPT, encoding="utf-8")
    return script


def build_demo(folder: str | os.PathLike[str], *, traced: bool = False) -> Demo:
    """Build the demo cache in `<folder>/cache` by running the pipeline in a subprocess (so that
    `HF_DATASETS_CACHE` is read fresh by `datasets`). Needs `datasets` installed."""
    import importlib.util

    try:
        found = importlib.util.find_spec("datasets") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        found = False
    if not found:
        raise MissingDependency("datasets", 'install it with: pip install "cachetool[datasets]"')
    base = Path(folder).expanduser().resolve()
    script = write_demo_files(base)
    cache = base / "cache"
    quiet = {
        "HF_HUB_OFFLINE": "1",
        "HF_UPDATE_DOWNLOAD_COUNTS": "0",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    env = {**quiet, **os.environ, "HF_DATASETS_CACHE": str(cache)}
    cmd = [sys.executable, *(["-m", "cachetool", "run"] if traced else []), str(script)]
    proc = subprocess.run(cmd, env=env, cwd=base, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise CachetoolError(f"demo pipeline {script} failed (exit {proc.returncode}): {tail}")
    fp = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return Demo(base, cache, script, fp)
