"""Long races against gc, run by hand (CI runs a few rounds of each in tests/attack/):

    python -m tests.soak --iterations 1000            # both soaks
    python -m tests.soak --iterations 100 --only pipeline

* mapped:   200 old cache files, `gc --max-size 1 -y`, a reader mapping files as the first goes;
            every file the reader holds must survive.
* pipeline: a real `datasets` pipeline (csv load, map, filter, num_proc map) runs again and again
            on one cache while `gc --max-size 1 --min-age 0 -y` runs in a loop beside it; the
            pipeline must never fail and gc must never print a traceback.

Prints one line per failure and a summary; exits 1 if anything was lost.

Another host's gc beside a live leased writer (PID and UTS namespaces) soaks through its test:

    CACHETOOL_HOSTS_SOAK=40 python -m pytest tests/test_hosts.py -k live_leased -s
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from tests.attack.races import mapped_files_survive_gc

PIPELINE = textwrap.dedent(
    """\
    import os, sys
    from datasets import load_dataset
    here = os.path.dirname(os.path.abspath(__file__))

    def add(ex):
        return {"n": len(ex["text"])}

    def keep(ex):
        return ex["n"] % 3 != 0

    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    ds = ds.map(add).filter(keep).map(lambda b: {"u": [t.upper() for t in b["text"]]}, batched=True)
    assert len(ds) > 0 and ds[0]["u"]
    # No file this process maps may be deleted while it holds it. The kernel says so: a deleted
    # file shows as "(deleted)" in /proc/self/maps. (Its path alone is no proof: gc renames an
    # item aside for a moment before it finds it mapped and puts it back.)
    import time
    time.sleep(0.3)
    held = {f["filename"] for f in ds.cache_files}
    with open("/proc/self/maps") as maps:
        lost = sorted({line.rstrip().split(None, 5)[5][: -len(" (deleted)")] for line in maps
                       if line.rstrip().endswith("(deleted)") and ".arrow" in line})
    if lost:
        sys.exit(f"lost {len(lost)} mapped file(s) (deleted while mapped): {lost[0]}")
    missing = [p for p in held if not os.path.exists(p)]
    if missing:
        time.sleep(2)  # set aside by a gc that is checking it: it must be back by now
        missing = [p for p in missing if not os.path.exists(p)]
    if missing:
        sys.exit(f"{len(missing)} mapped file(s) gone from their path: {missing[0]}")
    """
)


def env_for(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_"))}
    env.update(
        HF_DATASETS_CACHE=str(base / "cache"),
        HF_HOME=str(base / "hf_home"),
        HF_HUB_OFFLINE="1",
        HF_UPDATE_DOWNLOAD_COUNTS="0",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        CACHETOOL_HOME=str(base / "cachetool_home"),
        TMPDIR=str(base / "tmp"),
    )
    (base / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def soak_mapped(iterations: int, base: Path) -> int:
    failures = 0
    env = env_for(base)
    for i in range(iterations):
        held, lost = mapped_files_survive_gc(base / f"mapped{i}", 200, env)
        if lost:
            failures += 1
            print(f"mapped #{i}: gc deleted {len(lost)} of {len(held)} files a live reader held", flush=True)
        subprocess.run(["rm", "-rf", str(base / f"mapped{i}")], check=False)
    return failures


def soak_pipeline(iterations: int, base: Path) -> int:
    work = base / "pipeline"
    work.mkdir(parents=True, exist_ok=True)
    (work / "data.csv").write_text(
        "id,text\n" + "".join(f"{i},row {i} {'x' * (i % 50)}\n" for i in range(3000))
    )
    (work / "pipeline.py").write_text(PIPELINE)
    env = env_for(work)
    stop = threading.Event()
    gc_problems: list[str] = []

    def gc_loop() -> None:
        root = work / "cache"
        while not stop.is_set():
            if not root.exists():
                time.sleep(0.05)
                continue
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "cachetool",
                    "gc",
                    "--cache-dir",
                    str(root),
                    "--max-size",
                    "1",
                    "--min-age",
                    "0",
                    "--include-sources",
                    "-y",
                ],
                env=env,
                capture_output=True,
                text=True,
            )
            if "Traceback" in proc.stderr:
                gc_problems.append(proc.stderr.strip().splitlines()[-1])

    thread = threading.Thread(target=gc_loop, daemon=True)
    thread.start()
    failures = 0
    try:
        for i in range(iterations):
            proc = subprocess.run(
                [sys.executable, "pipeline.py"], cwd=work, env=env, capture_output=True, text=True
            )
            if proc.returncode != 0:
                failures += 1
                tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
                print(f"pipeline #{i}: failed beside gc: {tail[0]}", flush=True)
    finally:
        stop.set()
        thread.join()
    for p in gc_problems:
        failures += 1
        print(f"gc printed a traceback: {p}", flush=True)
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--only", choices=["mapped", "pipeline"], default=None)
    ns = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ct-soak-"))
    t0 = time.time()
    total = 0
    try:
        if ns.only in (None, "mapped"):
            n = soak_mapped(ns.iterations, base)
            print(f"mapped: {ns.iterations} rounds, {n} lost files", flush=True)
            total += n
        if ns.only in (None, "pipeline"):
            n = soak_pipeline(ns.iterations, base)
            print(f"pipeline: {ns.iterations} runs beside a gc loop, {n} failures", flush=True)
            total += n
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
    print(f"{'FAILED' if total else 'ok'}: {total} problem(s) in {time.time() - t0:.0f}s")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
