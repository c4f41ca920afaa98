"""One real pipeline, run once per test session, shared by the lineage tests.

The same script runs three times, concurrently: under `cachetool run` (records to the ledger),
under plain `python` (no cachetool at all), and under `cachetool run` with an events file (the
determinism runner's mode). Each run gets its own cache root; the input files are shared, so the
fingerprints must agree across the runs. The `cachetool run` that records to the ledger saves
with a spawn pool of 2 processes (`save_to_disk(num_proc=2)`); the plain run, there for its
fingerprints, and the events-file run, there for its events, save in their own process
(`--save-here`: about 1.3 s of CPU less each, two interpreters that import datasets). The
`cachetool run`s fork from a warm parent (tests/forks.py): they share a hash seed, so what
proves that tracing changes no fingerprint is their agreement with the plain run, a fresh
interpreter with a seed of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # tests/ may or may not be a package
    from tests import forks
except ImportError:
    import forks  # type: ignore[no-redef]

PIPELINE = textwrap.dedent(
    '''\
    """A pipeline that touches every recorded kind of step."""
    import json
    import os
    import sys

    out = os.path.abspath(sys.argv[1])
    # Set before `import datasets`, which reads it at import: tracing must not import datasets early.
    os.environ["HF_DATASETS_CACHE"] = os.path.join(out, "cache")
    here = os.path.dirname(os.path.abspath(__file__))

    import datasets
    from datasets import Dataset, concatenate_datasets, load_dataset, load_from_disk


    def add_len(ex):
        return {"n": len(ex["text"])}


    def upper(batch):
        return {"up": [t.upper() for t in batch["text"]]}


    def double(ex):
        return {"n2": ex["n"] * 2}


    def is_even(ex):
        return ex["id"] % 2 == 0


    def score(ex):
        return {"score": ex["n"] + 1}


    def make_unhashable():
        numbers = (i for i in range(3))

        def tag(ex):
            return {"tag": numbers is not None}

        return tag


    if __name__ == "__main__":
        assert str(datasets.config.HF_DATASETS_CACHE) == os.path.join(out, "cache")
        fps = {}
        csv = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
        fps["csv"] = csv._fingerprint
        js = load_dataset("json", data_files=os.path.join(here, "data.jsonl"), split="train")
        fps["json"] = js._fingerprint
        fps["parquet"] = load_dataset("parquet", data_files=os.path.join(here, "data.parquet"),
                                      split="train")._fingerprint
        m = csv.map(add_len)
        fps["map"] = m._fingerprint
        b = m.map(upper, batched=True, batch_size=8)
        fps["batched"] = b._fingerprint
        p = b.map(double, num_proc=2)
        fps["num_proc"] = p._fingerprint
        f = p.filter(is_even)
        fps["filter"] = f._fingerprint
        fps["select"] = f.select([3, 1, 2, 0])._fingerprint
        sh = f.shuffle(seed=42)
        fps["shuffle"] = sh._fingerprint
        so = sh.sort("n")
        fps["sort"] = so._fingerprint
        tts = so.train_test_split(test_size=0.25, seed=0)
        fps["train"], fps["test"] = tts["train"]._fingerprint, tts["test"]._fingerprint
        rc = tts["train"].remove_columns(["up"])
        fps["remove_columns"] = rc._fingerprint
        saved = os.path.join(out, "saved")
        # A spawn pool (each worker a new interpreter importing datasets), unless told to save in
        # this process: the saved dataset and what is made from it have the same fingerprints.
        rc.save_to_disk(saved, num_proc=None if "--save-here" in sys.argv else 2)
        loaded = load_from_disk(saved)
        fps["loaded"] = loaded._fingerprint
        fps["loaded_map"] = loaded.map(score)._fingerprint
        fps["concat"] = concatenate_datasets([tts["train"], tts["test"]])._fingerprint
        fps["new_fp"] = m.map(double, new_fingerprint="my-step-1")._fingerprint
        fps["branch1"] = csv.filter(lambda ex: ex["id"] < 10)._fingerprint
        fps["branch2"] = csv.map(upper, batched=True)._fingerprint
        fps["random"] = csv.map(make_unhashable())._fingerprint
        mem = Dataset.from_dict({"x": [1, 2, 3]})
        fps["mem_root"] = mem._fingerprint
        fps["mem_map"] = mem.map(lambda ex: {"y": ex["x"] * 2})._fingerprint
        print(json.dumps(fps))
    '''
)


def subprocess_env(base: Path, **extra: str) -> dict[str, str]:
    """Everything `datasets` and cachetool touch points inside `base`; nothing reaches the network.
    The pipeline names its cache folders itself, so the default cache is one nobody uses."""
    try:
        from tests.conftest import hf_env
    except ImportError:  # imported as a top-level module
        from conftest import hf_env  # type: ignore[no-redef]

    return hf_env(base, **{"HF_DATASETS_CACHE": str(base / "unused-default-cache"), **extra})


def write_inputs(folder: Path, rows: int = 40) -> Path:
    """The script and its csv, jsonl and parquet inputs; returns the script."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    texts = [" ".join(words[: 1 + (i * 7) % 5]) + f" {i}" for i in range(rows)]
    with open(folder / "data.csv", "w", encoding="utf-8") as f:
        f.write("id,text\n")
        for i, t in enumerate(texts):
            f.write(f"{i},{t}\n")
    with open(folder / "data.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    pq.write_table(pa.table({"id": list(range(rows)), "text": texts}), folder / "data.parquet")
    script = folder / "pipeline.py"
    script.write_text(PIPELINE, encoding="utf-8")
    return script


@dataclass(frozen=True)
class PipelineRuns:
    base: Path
    script: Path
    traced: Path  # output folder of the `cachetool run` run (cache/, saved/)
    plain: Path
    events_run: Path
    events_file: Path
    fps: dict[str, str]  # what the traced run's datasets reported
    plain_fps: dict[str, str]
    events_fps: dict[str, str]
    env: dict[str, str]
    stderr: str

    @property
    def cache(self) -> Path:
        return self.traced / "cache"

    @property
    def saved(self) -> Path:
        return self.traced / "saved"

    def events(self) -> list[dict[str, Any]]:
        with open(self.events_file, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


_RUNS: PipelineRuns | None = None


def pipeline_runs(base: Path) -> PipelineRuns:
    """Run the three pipelines once per session (concurrently: two cores). `base` may be shared
    by the session's xdist workers: the first runs them, the others read what it recorded."""
    from filelock import FileLock

    global _RUNS
    if _RUNS is not None:
        return _RUNS
    env = subprocess_env(base)
    events_file = base / "events" / "events.jsonl"
    done = base.with_name(base.name + ".json")
    with FileLock(f"{base}.lock"):
        if not done.exists():
            done.write_text(json.dumps(_run_pipelines(base, env, events_file)))
    outputs = json.loads(done.read_text())
    _RUNS = PipelineRuns(
        base=base,
        script=base / "project" / "pipeline.py",
        traced=base / "traced",
        plain=base / "plain",
        events_run=base / "events",
        events_file=events_file,
        fps=outputs["traced"][0],
        plain_fps=outputs["plain"][0],
        events_fps=outputs["events"][0],
        env=env,
        stderr=outputs["traced"][1],
    )
    return _RUNS


def _run_pipelines(base: Path, env: dict[str, str], events_file: Path) -> dict[str, Any]:
    """The traced, plain and events-file runs, side by side: each one's fingerprints and stderr."""
    script = write_inputs(base / "project")
    runs = {
        "traced": ([sys.executable, "-m", "cachetool", "run", str(script), str(base / "traced")], env),
        "plain": ([sys.executable, str(script), str(base / "plain"), "--save-here"], env),
        "events": (
            [sys.executable, "-m", "cachetool", "run", str(script), str(base / "events"), "--save-here"],
            {**env, "CACHETOOL_TRACE_EVENTS": str(events_file), "CACHETOOL_TRACE_TREES": "1"},
        ),
    }
    procs = {name: _start(cmd, e, base / "project") for name, (cmd, e) in runs.items()}
    outputs = {}
    for name, proc in procs.items():
        out, err = (b.decode() for b in proc.communicate(timeout=240))
        assert proc.returncode == 0, f"{name} run failed:\n{err[-4000:]}"
        outputs[name] = (json.loads(out.strip().splitlines()[-1]), err)
    return outputs


def _start(cmd: list[str], env: dict[str, str], cwd: Path) -> forks.ForkedProcess | subprocess.Popen[bytes]:
    """`cmd` started with its output piped: a `cachetool run` forked warm (`forks.PIPELINE`: the
    traced runs share a hash seed, and each is compared with the plain run, a fresh interpreter
    with its own), the plain `python` run as a process of its own."""
    if cmd[1:3] == ["-m", "cachetool"] and forks.available():
        return forks.ForkedProcess(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preload=forks.PIPELINE
        )
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
