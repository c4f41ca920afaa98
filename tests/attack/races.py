"""Real processes racing gc, shared by the attack tests and the hand-run soak (`python -m tests.soak`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HOUR = 3600.0


def synthesize_cache(root: Path, files: int, age: float = 2 * HOUR) -> list[Path]:
    """`files` derived cache files (`cache-<fp>.arrow`, real Arrow streams with the metadata
    `datasets` writes) in one builder folder, all `age` seconds old. Returns them, oldest first."""
    import pyarrow as pa

    folder = root / "csv" / "default-0123456789abcdef" / "0.0.0" / ("7" * 64)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset_info.json").write_text(
        json.dumps({"splits": {"train": {"name": "train", "num_examples": 4, "dataset_name": "csv"}}})
    )
    batch = pa.record_batch([pa.array(range(64))], names=["id"])
    features = {"id": {"dtype": "int64", "_type": "Value"}}
    out = []
    now = time.time()
    for i in range(files):
        fp = f"{i:016x}"
        meta = {"huggingface": json.dumps({"info": {"features": features}, "fingerprint": fp})}
        schema = batch.schema.with_metadata(meta)
        path = folder / f"cache-{fp}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            w.write_batch(batch.replace_schema_metadata(schema.metadata))
        t = now - age - (files - i)  # distinct ages: eviction order is the list order
        os.utime(path, (t, t))
        out.append(path)
    return out


#: A reader that memory-maps every file it can as soon as the first one of the list is gone (as
#: `datasets` maps a cache hit), reports which it holds, and keeps them mapped until stdin closes.
READER = textwrap.dedent(
    """\
    import json, os, sys, time
    import pyarrow as pa

    paths = json.loads(sys.argv[1])
    deadline = time.time() + 60
    while os.path.exists(paths[0]) and time.time() < deadline:
        time.sleep(0.0005)
    held, tables = [], []
    for p in reversed(paths[1:]):
        try:
            source = pa.memory_map(p)
            tables.append(pa.ipc.open_stream(source).read_all())
            held.append(p)
        except (FileNotFoundError, OSError):
            pass
    print(json.dumps(held), flush=True)
    sys.stdin.read()
    """
)


def start_reader(paths: list[Path]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", READER, json.dumps([os.fspath(p) for p in paths])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def mapped_files_survive_gc(
    root: Path, files: int, env: dict[str, str], put_back: list[str] | None = None
) -> tuple[list[str], list[str]]:
    """One round: a cache of `files` old entries, `gc --max-size 1 -y`, a reader mapping files as
    the first goes. Returns (files the reader held, those of them gc deleted); adds to `put_back`
    the files gc took out of reach, then found mapped and put back (the race's narrow window)."""
    paths = synthesize_cache(root, files)
    reader = start_reader(paths)
    try:
        gc = subprocess.run(
            [
                sys.executable,
                "-m",
                "cachetool",
                "gc",
                "--cache-dir",
                os.fspath(root),
                "--max-size",
                "1",
                "-y",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert reader.stdout is not None
        held: list[str] = json.loads(reader.stdout.readline() or "[]")
        lost = [p for p in held if not os.path.exists(p)]
        assert "Traceback" not in gc.stderr, gc.stderr
        if put_back is not None:
            skipped = json.loads(gc.stdout)["result"]["skipped"]
            put_back += [s["path"] for s in skipped if (s["reason"] or "").endswith("(put back)")]
        return held, lost
    finally:
        if reader.stdin is not None:
            reader.stdin.close()
        reader.wait(timeout=60)


#: A `datasets` pipeline whose map writes slowly (about 10 s): argv[1] is the CSV it makes.
SLOW_MAP = """\
import sys, time
from datasets import load_dataset
csv = sys.argv[1]
with open(csv, "w") as f:
    f.write("id\\n" + "".join(f"{i}\\n" for i in range(200)))
ds = load_dataset("csv", data_files=csv, split="train")
def slow(x):
    time.sleep(0.05)
    return {"y": x["id"] * 2}
ds.map(slow, writer_batch_size=10)
"""
