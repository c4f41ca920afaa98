"""The pipeline of the `--once` tests, run by several processes at once on one cache:
`cachetool run --once once_pipeline.py WORK OUT`, or `python once_pipeline.py WORK OUT --api`
(the steps inside `cachetool.prepare_once()`). It waits for `WORK/go` (so that every rank starts its
steps together), then runs a DatasetDict map and filter (one fingerprint per split), a num_proc
map and a shuffle. Each call of a user function appends a line to `WORK/count-<step>`: the pid
of the rank (the parent of a num_proc worker) and the first value of its batch (which tells the
split). With `WORK/block` present, the map's second batch (the first is in its unfinished file)
writes the process's pid to `WORK/started` and waits for `WORK/release`. The result (fingerprints
and rows) goes to OUT as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(work: Path, out: Path) -> None:
    while not (work / "go").exists():
        time.sleep(0.005)
    from datasets import load_dataset

    def counted(step: str, first: int) -> None:
        with open(work / f"count-{step}", "a") as f:
            # A num_proc map's function runs in the workers: the rank is their parent.
            f.write(f"{os.getppid() if step == 'num_proc' else os.getpid()} {first}\n")

    def double(batch: dict[str, list[int]]) -> dict[str, list[int]]:
        counted("map", batch["x"][0])
        # Told by the batch, not by state the function keeps: that would change its fingerprint.
        if batch["x"][0] == 11 and (work / "block").exists() and not (work / "release").exists():
            (work / "started").write_text(str(os.getpid()))
            while not (work / "release").exists():
                time.sleep(0.01)
        return {"y": [x * 2 for x in batch["x"]]}

    def even(batch: dict[str, list[int]]) -> list[bool]:
        counted("filter", batch["y"][0])
        return [y % 4 == 0 for y in batch["y"]]

    def plus(batch: dict[str, list[int]]) -> dict[str, list[int]]:
        counted("num_proc", batch["y"][0])
        return {"z": [y + 1 for y in batch["y"]]}

    files = {split: str(work / f"{split}.csv") for split in ("train", "test")}
    dd = load_dataset("csv", data_files=files)
    dd = dd.map(double, batched=True, batch_size=10).filter(even, batched=True)
    train = dd["train"].map(plus, batched=True, num_proc=2).shuffle(seed=0)
    result = {
        "fingerprints": [train._fingerprint, dd["test"]._fingerprint],
        "rows": [train.to_dict(), dd["test"].to_dict()],
    }
    out.write_text(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    if sys.argv[3:] == ["--api"]:
        import cachetool

        with cachetool.prepare_once():
            main(Path(sys.argv[1]), Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
