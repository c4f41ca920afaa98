"""An indices file whose data was removed is an orphan (a warning gc can remove), not a corruption."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent(
    """\
    import json, sys
    from datasets import load_dataset
    csv = sys.argv[1]
    with open(csv, "w") as f:
        f.write("id,text\\n" + "".join(f"{i},row {i}\\n" for i in range(400)))
    ds = load_dataset("csv", data_files=csv, split="train")
    shuffled = ds.shuffle(seed=0)
    small = ds.filter(lambda x: x["id"] < 10).map(lambda x: {"n": len(x["text"])})
    print(json.dumps({"source": ds._fingerprint, "shuffled": shuffled._fingerprint,
                      "small": small._fingerprint}))
    """
)


def test_indices_whose_data_gc_removed_are_orphans_not_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shuffle's indices (up to 399) stay after `gc <source> --include-sources` removed the
    400-row split they index; the only data left in the folder has 10 rows. verify reports the
    indices as an orphan warning (exit 0), not "points past the end of every dataset";
    `--quarantine` leaves it in place; the hint, pasted, removes it."""
    env = hf_env(tmp_path)
    monkeypatch.setenv("CACHETOOL_HOME", env["CACHETOOL_HOME"])  # the in-process commands' home
    proc = subprocess.run(
        [sys.executable, "-c", PIPELINE, str(tmp_path / "items.csv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = json.loads(proc.stdout.strip().splitlines()[-1])
    cache = ["--cache-dir", env["HF_DATASETS_CACHE"]]
    runner = CliRunner()
    gone = runner.invoke(app, ["gc", made["source"], "--include-sources", "--min-age", "0", "-y", *cache])
    assert gone.exit_code == 0, gone.output
    result = runner.invoke(app, ["verify", "--json", "--quarantine", "--yes", *cache], catch_exceptions=False)
    doc = json.loads(result.stdout)
    assert result.exit_code == 0, [f for f in doc["findings"] if f["severity"] == "error"]
    assert doc["quarantined"] == []
    orphans = [f for f in doc["findings"] if f["entry"] == made["shuffled"]]
    assert [(f["severity"], f["problem"].split(":")[0]) for f in orphans] == [("warning", "orphan")]
    path = Path(orphans[0]["path"])
    assert path.is_file()
    hint = orphans[0]["hint"]
    assert hint.startswith("cachetool gc "), hint
    pasted = runner.invoke(app, [*shlex.split(hint)[1:], "--yes"])  # --yes: the answer to its prompt
    assert pasted.exit_code == 0, pasted.output
    assert not path.exists()
