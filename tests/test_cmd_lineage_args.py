"""`lineage` shows every argument that defines a step: `fn_kwargs`, `num_proc`, `select` indices and
`cast` features (summarised when large), and labels each step with the line where it was called,
so two branches made by one function with different arguments look different in every format."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests import forks
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    import forks  # type: ignore[no-redef]
    from conftest import cachetool_run  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent(
    """\
    import json, sys
    from datasets import Features, Value, load_dataset

    def keep(ex, min_tokens):
        return len(ex["text"].split()) >= min_tokens

    def tag(ex):
        return {"n": len(ex["text"])}

    if __name__ == "__main__":
        ds = load_dataset("csv", data_files=sys.argv[1], split="train")
        ds = ds.map(tag, num_proc=2)
        five = ds.filter(keep, fn_kwargs={"min_tokens": 5})
        eight = ds.filter(keep, fn_kwargs={"min_tokens": 8})
        head = ds.select(range(0, 20000))
        picked = ds.select(list(range(0, 40000, 2)))
        cast = ds.cast(Features({"id": Value("int32"), "text": Value("string"), "n": Value("int32")}))
        print(json.dumps({"five": five._fingerprint, "eight": eight._fingerprint, "head": head._fingerprint,
                          "picked": picked._fingerprint, "cast": cast._fingerprint, "map": ds._fingerprint}))
    """
)
LINE_FIVE = 13  # the line of each call in PIPELINE
LINE_EIGHT = 14


@dataclass(frozen=True)
class Made:
    base: Path
    env: dict[str, str]
    fps: dict[str, str]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    base = tmp_path_factory.mktemp("args")
    (base / "p.py").write_text(PIPELINE, encoding="utf-8")
    words = " ".join(f"w{i}" for i in range(10))
    (base / "d.csv").write_text(
        "id,text\n" + "".join(f"{i},{' '.join(words.split()[: 1 + i % 10])}\n" for i in range(40000)),
        encoding="utf-8",
    )
    env = subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"))
    proc = cachetool_run("p.py", "d.csv", env=env, cwd=base, warm=True)
    return Made(base, env, json.loads(proc.stdout.strip().splitlines()[-1]))


def lineage(made: Made, fp: str, *args: str) -> str:
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "lineage", fp, *args],
        env=made.env,
        cwd=made.base,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_two_branches_with_different_fn_kwargs_differ_in_every_format(made: Made) -> None:
    """`filter(keep, fn_kwargs={"min_tokens": 5})` and `... 8` from one dataset: the last step of
    each chain names its `min_tokens` and the line it was called at, in human, JSON, dot and
    mermaid."""
    for fmt in ((), ("--json",), ("--format", "dot"), ("--format", "mermaid")):
        five = lineage(made, made.fps["five"], *fmt)
        eight = lineage(made, made.fps["eight"], *fmt)
        assert "min_tokens" in five and "5" in five.split("min_tokens", 1)[1][:12], fmt
        assert "min_tokens" in eight and "8" in eight.split("min_tokens", 1)[1][:12], fmt
        if fmt == ("--json",):  # the call site is a field there: {"file": ..., "line": 13}
            five, eight = (
                json.dumps(json.loads(text)["steps"][-1]["call_site"]).replace('", "line": ', ":")
                for text in (five, eight)
            )
        assert f"p.py:{LINE_FIVE}" in five and f"p.py:{LINE_EIGHT}" in eight, fmt
        assert f"p.py:{LINE_EIGHT}" not in five and f"p.py:{LINE_FIVE}" not in eight, fmt
    steps = json.loads(lineage(made, made.fps["five"], "--json"))["steps"]
    assert steps[-1]["call_site"]["line"] == LINE_FIVE
    assert steps[-1]["function"]["line"] == 4  # where keep is defined stays in the JSON


def test_num_proc_select_indices_and_cast_features_are_shown(made: Made) -> None:
    """The map records `num_proc=2`; `select(range(0, 20000))` shows the range; a select of 20000
    listed indices shows a count and a digest, not nothing; `cast` shows the features."""
    steps = json.loads(lineage(made, made.fps["map"], "--json"))["steps"]
    assert steps[-1]["args"].get("num_proc") == "2"
    head = json.loads(lineage(made, made.fps["head"], "--json"))["steps"][-1]
    assert head["args"]["indices"] == "range(0, 20000)"
    picked = json.loads(lineage(made, made.fps["picked"], "--json"))["steps"][-1]
    assert picked["args"]["indices"].startswith("20000 ints, digest ")
    cast = json.loads(lineage(made, made.fps["cast"], "--json"))["steps"][-1]
    assert "id: int32" in cast["args"]["features"] and "text: string" in cast["args"]["features"]
    human = lineage(made, made.fps["picked"])
    assert "indices=20000 ints, digest " in human
