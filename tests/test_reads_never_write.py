"""Read commands never write into a cache root: what only makes them faster next time (the read
index, the kept listing text, the ledger index, schema verdicts) lives in the user's cache folder.
On a copy of a real traced cache, every read command leaves every path of the root as it was, and
each works on a root mounted read-only."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cachetool_run, copy_cache, hf_env, invoke

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent(
    """\
    import os
    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))
    ds = load_dataset("csv", data_files=os.path.join(here, "d.csv"), split="train")
    ds = ds.map(lambda ex: {"y": ex["x"] * 2}).filter(lambda ex: ex["x"] % 3 > 0)
    parts = ds.train_test_split(test_size=0.25, seed=0)
    print(parts["train"].map(lambda ex: {"z": ex["y"] + 1})._fingerprint)
    """
)


FORKS = Path(__file__).with_name("forks.py")

#: Run inside the mount namespace: each command of `OUT/commands.json` as `python -m cachetool`,
#: forked from a warm parent started there (tests/forks.py), its stdout, stderr and exit status
#: written to OUT/I.out, I.err and I.rc.
RUN_READS = textwrap.dedent(
    """\
    import importlib.util, json, os, sys
    spec = importlib.util.spec_from_file_location("forks", sys.argv[1])
    forks = importlib.util.module_from_spec(spec)
    sys.modules["forks"] = forks
    spec.loader.exec_module(forks)
    out = sys.argv[2]
    with open(os.path.join(out, "commands.json"), encoding="utf-8") as f:
        commands = json.load(f)
    for i, args in enumerate(commands):
        done = forks.run([*forks.CLI, *args], capture_output=True, timeout=120)
        for ext, data in (("out", done.stdout), ("err", done.stderr), ("rc", b"%d" % done.returncode)):
            with open(os.path.join(out, f"{i}.{ext}"), "wb") as f:
                f.write(data)
    forks.close_all()
    """
)


def _reads(fp: str, out: Path) -> list[list[str]]:
    """Every read command, as a user types it (the root added by the caller; `report` writes its
    page into `out`, outside the root)."""
    return [
        ["report", "-o", str(out / "report.html")],
        ["ls"],
        ["ls", "--json"],
        ["ls", "-q"],
        ["show", fp],
        ["lineage", fp],
        ["lineage", fp, "--descendants"],
        ["verify"],
        ["verify", "--deep"],
        ["verify", "--stale"],
        ["stats"],
        ["explain", "--last"],
        ["explain", fp],
        ["dirs"],
        ["stats", "--compact", "--dry-run"],
        ["gc", "--older-than", "1d", "--dry-run"],
        ["verify", "--quarantine", "--dry-run"],
    ]


def _state(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path below `root`: (mode, size, mtime_ns, inode)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            out[os.path.relpath(os.path.join(folder, name), root)] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                st.st_ino,
            )
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A cache two traced runs of a pipeline made (the second loads every step), and the last
    step's fingerprint."""
    base = tmp_path_factory.mktemp("reads")
    (base / "p.py").write_text(PIPELINE, encoding="utf-8")
    (base / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(60)), encoding="utf-8")
    env = hf_env(base)
    cachetool_run("p.py", env=env, cwd=base, warm=True)
    fp = cachetool_run("p.py", env=env, cwd=base, warm=True).stdout.split()[-1]
    return base / "cache", fp


def test_read_commands_leave_every_path_of_the_root_as_it_was(
    traced: tuple[Path, str], tmp_path: Path
) -> None:
    """On a copy of the cache, each read command in turn (twice: the second finds its speed-ups
    in the user's folder) creates, changes and removes nothing in the root, and exits 0; what it
    keeps is in the user's cache folder."""
    src, fp = traced
    root = tmp_path / "cache"
    copy_cache(src, root)
    env = {**hf_env(tmp_path), "HF_DATASETS_CACHE": str(root), "CACHETOOL_HOME": str(tmp_path / "home")}
    before = _state(root)
    for args in _reads(fp, tmp_path) * 2:
        result = (
            invoke(*args, "--cache-dir", str(root), env=env) if args != ["dirs"] else invoke(*args, env=env)
        )
        assert result.exit_code == 0, (args, result.output)
        assert _state(root) == before, (args, set(_state(root).items()) ^ set(before.items()))
    kept = {p.name for p in (tmp_path / "home" / "derived").rglob("*") if p.is_file()}
    assert "read-index.z" in kept, kept
    (folder,) = (tmp_path / "home" / "derived" / "roots").iterdir()
    assert folder.stat().st_mode & 0o077 == 0, oct(folder.stat().st_mode)  # the user's alone


def test_read_commands_work_on_a_read_only_root(traced: tuple[Path, str], tmp_path: Path) -> None:
    """The cache mounted read-only (a bind mount in a private mount namespace): every read
    command exits 0 and says what it says on a writable one."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    src, fp = traced
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    env = {**hf_env(tmp_path), "HF_DATASETS_CACHE": str(mnt), "CACHETOOL_HOME": str(tmp_path / "home")}
    reads = _reads(fp, out)
    commands = [[*args, *(["--cache-dir", str(mnt)] if args != ["dirs"] else [])] for args in reads]
    (out / "commands.json").write_text(json.dumps(commands), encoding="utf-8")
    run = f"{shlex.quote(sys.executable)} -c {shlex.quote(RUN_READS)} {shlex.quote(str(FORKS))} {out}"
    mounted = out / "mounted"
    lines = [f"mount --bind {src} {mnt}", f"mount -o remount,ro,bind {mnt}", f"! touch {mnt}/x 2>/dev/null"]
    lines += [f"touch {mounted}", run]
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    done = subprocess.run(["unshare", *user, "--mount", "sh", "-ec", "\n".join(lines)], env=env, timeout=300)
    if not mounted.exists():
        pytest.skip("cannot mount read-only here (no mount namespace)")
    assert done.returncode == 0
    for i, args in enumerate(reads):
        rc = (out / f"{i}.rc").read_text().strip()
        assert rc == "0", (args, (out / f"{i}.err").read_text()[-2000:])
    listing = json.loads((out / f"{reads.index(['ls', '--json'])}.out").read_text())
    assert listing["entries"], listing
