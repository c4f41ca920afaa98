"""Two real runs of one pipeline, with a change of each kind in between, for `explain` and `stats`.

Each call site of the script exercises one reason a step is recomputed (or wrongly reused):

=========  ===========================================================  =========================
step       what changes between run 1 and run 2                         expected explanation
=========  ===========================================================  =========================
base       nothing                                                      a hit
threshold  `fn_kwargs={"threshold": ...}` from the THRESHOLD variable   argument 0.5 → 0.6
cascade    nothing, but its input is `threshold`'s result               its input changed
shout      the script is edited: `.upper()` → `.casefold()`             function source, the line
tag        nothing: a set literal of str pickles in hash-seed order     nondeterministic
random     nothing: an argument holds a generator                       random fingerprint
wbs        `writer_batch_size` from the WBS variable                    only a non-semantic arg
global     a module-level constant the function reads (LIMIT variable)  function → global 'LIMIT'
data2      the second csv file gets one more row                        source dataset changed
stale      `clean_row` in text_helpers.py is edited (by reference)      a stale hit
stale_dep  `normalize` (in the script) calls the edited `clean_text`    a stale hit
big        nothing; its function closes over a 10 MB array              a hit; small records
=========  ===========================================================  =========================

Both runs take about ten seconds together (the steps are tiny; most of it is importing datasets).
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

SCRIPT = textwrap.dedent(
    """\
    import json
    import os
    import sys

    import numpy as np
    from datasets import load_dataset

    from text_helpers import clean_row, clean_text

    here = os.path.dirname(os.path.abspath(__file__))
    THRESHOLD = float(os.environ.get("THRESHOLD", "0.5"))
    WBS = int(os.environ.get("WBS", "1000"))
    LIMIT = int(os.environ.get("LIMIT", "5"))


    def add_len(ex):
        return {"n": len(ex["text"])}


    def keep(ex, threshold):
        return ex["n"] * 0.01 < threshold + 1


    def shout(ex):
        return {"up": ex["text"].upper()}


    def tag(ex):
        return {"stop": ex["text"] in {"alpha", "beta", "gamma", "delta", "epsilon"}}


    def ident(ex, model):
        return {"m": 1}


    def add_one(ex):
        return {"n1": ex["n"] + 1}


    def short(ex):
        return {"short": ex["n"] < LIMIT}


    def normalize(ex):
        return {"norm": clean_text(ex["text"])}


    def make_big():
        table = np.zeros(10_000_000 // 8)

        def lookup(ex):
            return {"big": float(table[ex["n"]])}

        return lookup


    if __name__ == "__main__":
        fps = {}
        csv = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
        base = csv.map(add_len)
        fps["base"] = base._fingerprint
        thr = base.filter(keep, fn_kwargs={"threshold": THRESHOLD})
        fps["threshold"] = thr._fingerprint
        fps["cascade"] = thr.map(add_one)._fingerprint
        fps["shout"] = base.map(shout)._fingerprint
        fps["tag"] = base.map(tag)._fingerprint
        fps["random"] = base.map(ident, fn_kwargs={"model": (i for i in range(3))})._fingerprint
        fps["wbs"] = base.map(add_one, writer_batch_size=WBS)._fingerprint
        fps["global"] = base.map(short)._fingerprint
        csv2 = load_dataset("csv", data_files=os.path.join(here, "data2.csv"), split="train")
        fps["data2_source"] = csv2._fingerprint
        fps["data2"] = csv2.map(add_len)._fingerprint
        fps["stale"] = base.map(clean_row)._fingerprint
        fps["stale_dep"] = base.map(normalize)._fingerprint
        fps["big"] = base.map(make_big())._fingerprint
        print(json.dumps(fps))
    """
)

HELPERS_V1 = textwrap.dedent(
    """\
    def clean_text(text):
        return text.strip().lower()


    def clean_row(ex):
        return {"clean": clean_text(ex["text"])}
    """
)
# Version 2 edits one line of each helper; line numbers stay the same.
HELPERS_V2 = HELPERS_V1.replace("text.strip().lower()", "text.strip().casefold()").replace(
    '{"clean": clean_text(ex["text"])}', '{"clean": clean_text(ex["text"]) + "!"}'
)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@dataclass(frozen=True)
class ExplainRuns:
    base: Path
    project: Path
    cache: Path
    env: dict[str, str]
    first: dict[str, str]  # fingerprints of run 1, by step
    second: dict[str, str]  # fingerprints of run 2
    stderr: tuple[str, str]

    @property
    def script(self) -> Path:
        return self.project / "pipeline.py"

    @property
    def helpers(self) -> Path:
        return self.project / "text_helpers.py"

    def line(self, needle: str, text: str = SCRIPT) -> int:
        return _line_of(text, needle)


def _run(project: Path, env: dict[str, str]) -> tuple[dict[str, str], str]:
    proc = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def explain_runs(base: Path) -> ExplainRuns:
    """Run 1, change one thing per step, run 2 (see the module docstring)."""
    project = base / "project"
    project.mkdir(parents=True)
    rows = "".join(f"{i},alpha beta {i}\n" for i in range(30))
    (project / "data.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (project / "data2.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (project / "pipeline.py").write_text(SCRIPT, encoding="utf-8")
    (project / "text_helpers.py").write_text(HELPERS_V1, encoding="utf-8")
    cache = base / "cache"
    env = subprocess_env(base, HF_DATASETS_CACHE=str(cache))
    # Different hash seeds, so that the set literal in `tag` pickles in a different order.
    first, err1 = _run(project, {**env, "PYTHONHASHSEED": "1"})
    (project / "pipeline.py").write_text(SCRIPT.replace('ex["text"].upper()', 'ex["text"].casefold()'))
    (project / "text_helpers.py").write_text(HELPERS_V2, encoding="utf-8")
    with open(project / "data2.csv", "a", encoding="utf-8") as f:
        f.write("30,one more row\n")
    second, err2 = _run(
        project, {**env, "PYTHONHASHSEED": "3", "THRESHOLD": "0.6", "WBS": "500", "LIMIT": "6"}
    )
    return ExplainRuns(base, project, cache, env, first, second, (err1, err2))


def shared_explain_runs(tmp_path_factory: Any) -> ExplainRuns:
    """`explain_runs` once per test session, shared by pytest-xdist workers: the first worker to
    get the lock runs the pipeline twice, the others read what it wrote."""
    from filelock import FileLock

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = tmp_path_factory.getbasetemp()
    if worker:
        shared = shared.parent  # the session's folder, common to every worker
    base = shared / "explain-runs"
    done = shared / "explain-runs.json"
    with FileLock(str(shared / "explain-runs.lock")):
        if not done.exists():
            runs = explain_runs(base)
            done.write_text(json.dumps({"first": runs.first, "second": runs.second, "stderr": runs.stderr}))
        doc = json.loads(done.read_text())
    return ExplainRuns(
        base,
        base / "project",
        base / "cache",
        subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache")),
        doc["first"],
        doc["second"],
        tuple(doc["stderr"]),  # type: ignore[arg-type]
    )
