"""Build a real cache with complete entries and the leftovers of real SIGKILLs, for gc's tests.

Run as `python build_leftovers.py OUT` with HF_DATASETS_CACHE=OUT/cache and TMPDIR=OUT/tmp (the
tests' `hf_env` sets both). Complete entries: a CSV source, a traced chain (map -> map, recorded
in the ledger with its parents), a derived map, a filter (indices), a num_proc=2 map (shards), a
saved Dataset and a saved DatasetDict. Leftovers, each made by killing a real `datasets` process:

* a map killed mid-write: one `tmp*` file;
* a num_proc=2 map whose worker kills itself: two `tmp*` files, one of them 0 bytes;
* a `from_generator` preparation killed mid-way: `<version>.incomplete/` and its locks;
* a `save_to_disk` killed mid-way (its writer slowed down): data files without `state.json`;
* a pipeline with `disable_caching()` killed mid-map: `hf_datasets-*` in TMPDIR;
* a `load_dataset` of a remote CSV (a slow loopback server) killed mid-download:
  `downloads/<sha>.incomplete` and its lock, plus an empty `<hash>.incomplete/` and its locks.

Prints one JSON document: the fingerprints and the leftover paths (relative to OUT).
"""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

from killing import killed_fork, killed_run

OUT = Path(sys.argv[1]).resolve()
CACHE = Path(os.environ["HF_DATASETS_CACHE"]).resolve()
TMP = Path(os.environ["TMPDIR"]).resolve()
DATA = OUT / "data"
#: Each `ready` below already sees the killed writer mid-write (data written, a folder filled): a
#: kill this much later finds it there still (each writer has seconds of work left), with no wait.
SETTLE = 0.05

KILL_MAP = """
import sys, time
from datasets import load_dataset
ds = load_dataset("csv", data_files=sys.argv[1], split="train")
def slow(x):
    time.sleep(0.02)
    return {"slow": x["id"] * 2}
ds.map(slow, writer_batch_size=1)
"""

# Rank 1 writes a few batches, then kills itself as soon as rank 0's tmp file exists (created
# after rank 0's first example: the folder then holds two tmp files more than the argv[2] it
# held before); rank 0 is still in its first batch (5 s of it), so that file
# holds nothing yet (0 bytes). The parent sees the dead worker, terminates the pool and lives
# on: both tmp files stay.
KILL_WORKER = """
import glob, os, signal, sys, time
from datasets import load_dataset
ds = load_dataset("csv", data_files=sys.argv[1], split="train")
def f(x, rank):
    if rank == 0:
        time.sleep(0.5)
    elif x["id"] >= 200:
        tmps = os.path.join(os.environ["HF_DATASETS_CACHE"], "csv", "*", "*", "*", "tmp*")
        deadline = time.time() + 60
        while len(glob.glob(tmps)) < int(sys.argv[2]) + 2 and time.time() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    return {"w": rank}
try:
    ds.map(f, with_rank=True, num_proc=2, writer_batch_size=10)
except Exception as e:
    print("map failed:", type(e).__name__)
"""

KILL_PREPARE = """
import time
from datasets import Dataset
def gen():
    for i in range(100000):
        if i > 5:
            time.sleep(0.05)
        yield {"i": i}
Dataset.from_generator(gen, writer_batch_size=1)
"""

KILL_SAVE = """
import sys, time
import datasets.arrow_writer as aw
from datasets import Dataset
original = aw.ArrowWriter.write_table
def slow(self, *args, **kwargs):
    time.sleep(0.2)
    return original(self, *args, **kwargs)
aw.ArrowWriter.write_table = slow
Dataset.from_dict({"i": list(range(4000))}).save_to_disk(sys.argv[1], num_shards=20)
"""

KILL_UNCACHED = """
import sys, time
from datasets import disable_caching, load_dataset
disable_caching()
ds = load_dataset("csv", data_files=sys.argv[1], split="train")
ds = ds.map(lambda x: {"q": 1})
def slow(x):
    time.sleep(0.05)
    return {"z": 0}
ds.map(slow, writer_batch_size=1)
"""

KILL_DOWNLOAD = """
import sys
from datasets import load_dataset
load_dataset("csv", data_files=sys.argv[1], split="train")
"""

SLOW_BODY = ("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(20000))).encode()


class SlowCSV(http.server.BaseHTTPRequestHandler):
    """Serves one CSV file, 2 kB every 0.1 s: a download that is still running when killed."""

    def log_message(self, *args: object) -> None:
        pass

    def _head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(SLOW_BODY)))
        self.send_header("Content-Type", "text/csv")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._head()

    def do_GET(self) -> None:
        self._head()
        try:
            for i in range(0, len(SLOW_BODY), 2000):
                self.wfile.write(SLOW_BODY[i : i + 2000])
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass


def all_paths() -> set[Path]:
    out = set()
    for base in (CACHE, TMP):
        for dirpath, dirnames, filenames in os.walk(base):
            for n in dirnames + filenames:
                out.add(Path(dirpath) / n)
    return out


def rel(p: Path) -> str:
    return str(p.relative_to(OUT))


def main() -> None:
    import datasets
    from datasets import DatasetDict, load_dataset

    import cachetool

    DATA.mkdir(parents=True, exist_ok=True)
    csv_path = DATA / "items.csv"
    with open(csv_path, "w") as f:
        f.write("id,text,label\n")
        for i in range(300):
            f.write(f"{i},item number {i} {'x' * (i % 13)},{i % 3}\n")
    made: dict[str, object] = {"datasets_version": datasets.__version__, "csv": str(csv_path)}

    csv = load_dataset("csv", data_files=str(csv_path), split="train")
    made["source"] = csv._fingerprint
    made["csv_dir"] = rel(Path(csv.cache_files[0]["filename"]).parent)
    with cachetool.tracing():
        a = csv.map(lambda x: {"a": x["id"] + 1})
        b = a.map(lambda x: {"b": x["a"] * 2})
    made["chain_a"] = a._fingerprint
    made["chain_b"] = b._fingerprint
    made["derived"] = csv.map(lambda x: {"n": len(x["text"])})._fingerprint
    made["indices"] = csv.filter(lambda x: x["label"] != 1)._fingerprint
    made["shards"] = csv.map(
        lambda b: {"u": [t.upper() for t in b["text"]]}, batched=True, num_proc=2
    )._fingerprint
    split = csv.train_test_split(test_size=0.25, seed=1)
    made["train"] = split["train"]._fingerprint
    made["test"] = split["test"]._fingerprint
    DatasetDict({"train": split["train"], "test": split["test"]}).save_to_disk(
        str(CACHE / "saved" / "splits")
    )
    csv.save_to_disk(str(CACHE / "saved" / "items"), num_shards=2)
    made["complete"] = sorted(rel(p) for p in all_paths())

    csv_dir = OUT / made["csv_dir"]  # type: ignore[operator]
    leftovers: dict[str, list[str]] = {}

    def fresh(before: set[Path]) -> list[Path]:
        return sorted(all_paths() - before)

    before = all_paths()
    killed_fork(
        KILL_MAP,
        str(csv_path),
        ready=lambda: any(p.name.startswith("tmp") and p.stat().st_size > 0 for p in csv_dir.iterdir()),
        settle=SETTLE,
    )
    leftovers["killed_map"] = [rel(p) for p in fresh(before) if p.name.startswith("tmp")]

    before = all_paths()
    proc = subprocess.run(
        [sys.executable, "-c", KILL_WORKER, str(csv_path), str(len(list(csv_dir.glob("tmp*"))))],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "map failed" in proc.stdout, proc.stderr[-2000:]
    leftovers["killed_worker"] = [rel(p) for p in fresh(before) if p.name.startswith("tmp")]
    leftovers["killed_worker_other"] = [rel(p) for p in fresh(before) if not p.name.startswith("tmp")]

    gen_root = CACHE / "generator"
    before = all_paths()
    killed_fork(
        KILL_PREPARE,
        ready=lambda: (
            gen_root.exists()
            and any(p.name.endswith(".incomplete") and any(p.iterdir()) for p in gen_root.glob("*/*"))
        ),
        settle=SETTLE,
    )
    new = fresh(before)
    leftovers["killed_prepare"] = [rel(p) for p in new if p.name.endswith(".incomplete")]
    leftovers["killed_prepare_locks"] = [rel(p) for p in new if p.name.endswith(".lock")]
    leftovers["killed_prepare_other"] = [
        rel(p) for p in new if not p.name.endswith((".incomplete", ".lock")) and ".incomplete/" not in str(p)
    ]

    target = CACHE / "saved" / "killed"
    killed_fork(
        KILL_SAVE, str(target), ready=lambda: len(list(target.glob("data-*.arrow"))) >= 2, settle=SETTLE
    )
    assert not (target / "state.json").exists()
    leftovers["killed_save"] = [rel(target)]

    before = all_paths()
    killed_fork(
        KILL_UNCACHED,
        str(csv_path),
        ready=lambda: any(p.name.startswith("tmp") for d in TMP.glob("hf_datasets-*") for p in d.iterdir()),
        settle=SETTLE,
    )
    leftovers["killed_uncached"] = [rel(p) for p in fresh(before) if p.parent == TMP]

    downloads = CACHE / "downloads"
    before = all_paths()
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), SlowCSV) as httpd:
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}/remote.csv"
        killed_run(
            KILL_DOWNLOAD,
            url,
            HF_HUB_OFFLINE="0",
            ready=lambda: (
                downloads.is_dir() and any(p.stat().st_size > 0 for p in downloads.glob("*.incomplete"))
            ),
            settle=SETTLE,
        )
        httpd.shutdown()
    new = fresh(before)
    leftovers["killed_download"] = [rel(p) for p in new if p.parent == downloads]
    leftovers["killed_download_prepare"] = [
        rel(p)
        for p in new
        if (p.name.endswith(".incomplete") and p.parent != downloads) or p.name.endswith("_builder.lock")
    ]
    leftovers["killed_download_root_lock"] = [
        rel(p) for p in new if p.parent == CACHE and p.suffix == ".lock"
    ]

    made["leftovers"] = leftovers
    print(json.dumps(made))


if __name__ == "__main__":
    main()
