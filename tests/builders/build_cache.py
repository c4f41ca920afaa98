"""Build a real `datasets` cache holding every kind of entry cachetool knows.

Run as `python build_cache.py OUT`, with HF_DATASETS_CACHE set to OUT/cache by the caller (the
tests do). Everything here is made by the real library: loads, maps, shard sets, saves, a map
killed by SIGKILL mid-write, a prepare killed mid-way, a remote download from a local HTTP
server. It prints one JSON document describing what it made (fingerprints as `datasets`
reports them), which the tests assert against.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import socketserver
import sys
import tarfile
import threading
from pathlib import Path

from killing import killed_fork

OUT = Path(sys.argv[1]).resolve()
CACHE = Path(os.environ["HF_DATASETS_CACHE"]).resolve()
DATA = OUT / "data"
DATA.mkdir(parents=True, exist_ok=True)

KILL_MAP = """
import os, sys, time
from datasets import load_dataset
ds = load_dataset("csv", data_files=sys.argv[1], split="train")
def slow(x):
    time.sleep(0.02)
    return {"slow": x["id"] * 2}
ds.map(slow, writer_batch_size=1)
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


def main() -> None:
    import datasets
    from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

    made: dict[str, object] = {"cache": str(CACHE), "datasets_version": datasets.__version__}

    # A CSV source split, derived data, indices and a num_proc shard set.
    csv_path = DATA / "items.csv"
    with open(csv_path, "w") as f:
        f.write("id,text,label\n")
        for i in range(300):
            f.write(f"{i},item number {i} {'x' * (i % 13)},{i % 3}\n")
    csv = load_dataset("csv", data_files=str(csv_path), split="train")
    made["csv_source"] = csv._fingerprint
    made["csv_dir"] = os.path.dirname(csv.cache_files[0]["filename"])
    mapped = csv.map(lambda x: {"n": len(x["text"])})
    made["mapped"] = mapped._fingerprint
    filtered = mapped.filter(lambda x: x["label"] != 1)
    made["filtered"] = filtered._fingerprint
    made["filtered_rows"] = len(filtered)
    shuffled = mapped.shuffle(seed=3)
    made["shuffled"] = shuffled._fingerprint
    sharded = csv.map(lambda b: {"u": [t.upper() for t in b["text"]]}, batched=True, num_proc=2)
    made["shards"] = sharded._fingerprint
    named = csv.map(lambda x: {"k": 1}, new_fingerprint="my-own_fingerprint.v2")
    made["named"] = named._fingerprint
    split = mapped.train_test_split(test_size=0.25, seed=1)
    made["train"] = split["train"]._fingerprint
    made["test"] = split["test"]._fingerprint

    # A partial shard set: one num_proc shard whose sibling is gone.
    partial = csv.map(lambda x: {"p": 0}, num_proc=2)
    files = sorted(f["filename"] for f in partial.cache_files)
    os.remove(files[1])
    made["partial_shards"] = partial._fingerprint

    # A sharded source split: JSON from two files with num_proc=2.
    for k in range(2):
        with open(DATA / f"part{k}.jsonl", "w") as f:
            for i in range(50):
                f.write(json.dumps({"i": i + 50 * k, "s": f"row {i}"}) + "\n")
    js = load_dataset(
        "json", data_files=[str(DATA / "part0.jsonl"), str(DATA / "part1.jsonl")], split="train", num_proc=2
    )
    made["json_source"] = js._fingerprint
    made["json_files"] = [os.path.basename(f["filename"]) for f in js.cache_files]

    # save_to_disk: a Dataset in 2 shards, a DatasetDict, a map after load_from_disk, and an
    # interrupted save (state.json is written last; a save killed before it leaves none).
    saved = CACHE / "saved" / "items"
    mapped.save_to_disk(str(saved), num_shards=2)
    reloaded = load_from_disk(str(saved))
    made["saved_state_fp"] = json.loads((saved / "state.json").read_text())["_fingerprint"]
    made["saved_loaded_fp"] = reloaded._fingerprint
    remapped = reloaded.map(lambda x: {"m": 1})
    made["saved_remapped"] = remapped._fingerprint
    dd = DatasetDict({"train": split["train"], "test": split["test"]})
    dd.save_to_disk(str(CACHE / "saved" / "splits"))
    made["dict_train_state_fp"] = json.loads(
        (CACHE / "saved" / "splits" / "train" / "state.json").read_text()
    )["_fingerprint"]
    broken_save = CACHE / "saved" / "interrupted"
    Dataset.from_dict({"a": list(range(10))}).save_to_disk(str(broken_save))
    os.remove(broken_save / "state.json")

    # A map killed by SIGKILL mid-write leaves a tmp* file next to its input.
    csv_dir = Path(made["csv_dir"])  # type: ignore[arg-type]
    before = set(os.listdir(csv_dir))
    killed_fork(
        KILL_MAP,
        str(csv_path),
        ready=lambda: any(
            n.startswith("tmp") and (csv_dir / n).stat().st_size > 0
            for n in set(os.listdir(csv_dir)) - before
        ),
    )
    made["temp_files"] = sorted(n for n in set(os.listdir(csv_dir)) - before if n.startswith("tmp"))

    # A generator prepare killed mid-way leaves <version>.incomplete/.
    gen_root = CACHE / "generator"
    killed_fork(
        KILL_PREPARE,
        ready=lambda: (
            gen_root.exists()
            and any(p.name.endswith(".incomplete") and any(p.iterdir()) for p in gen_root.glob("*/*"))
        ),
    )
    made["incomplete_prepare"] = sorted(str(p) for p in gen_root.glob("*/*.incomplete"))

    # A remote CSV and a tar.gz served on loopback: downloads/ and downloads/extracted/.
    srv_dir = DATA / "served"
    srv_dir.mkdir(exist_ok=True)
    (srv_dir / "remote.csv").write_text("a,b\n1,2\n3,4\n")
    with tarfile.open(srv_dir / "bundle.tar.gz", "w:gz") as tar:
        tar.add(srv_dir / "remote.csv", arcname="bundle/remote.csv")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(srv_dir))
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as httpd:
        port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        remote = load_dataset("csv", data_files=f"http://127.0.0.1:{port}/remote.csv", split="train")
        made["remote_source"] = remote._fingerprint
        extracted = datasets.DownloadManager().download_and_extract(f"http://127.0.0.1:{port}/bundle.tar.gz")
        made["extracted"] = str(extracted)
        httpd.shutdown()

    print(json.dumps(made))


if __name__ == "__main__":
    main()
