"""Whatever another user of a shared cache puts in place of a file cachetool keeps in
`<root>/.cachetool/` (every name of `cachetool.cache.store.STATE_FILES`, so a new state file is
covered the day it is added) — a symlink to a file of the user, a FIFO, a symlink to
`/dev/zero`, a folder — no command writes anything outside the root, waits forever, or ends in a
traceback; and whatever such a file holds (truncated, huge, binary, `Infinity`/`NaN`, deeply
nested JSON), every command ends normally."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from cachetool.cache.layout import LEDGER_DIR
from cachetool.cache.store import STATE_FILES
from cachetool.maintenance.verify.deep import VERDICTS_NAME
from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env, once_per_session

pytestmark = pytest.mark.slow

SUBSTITUTES = ("symlink-out", "fifo", "dev-zero", "folder")


def _commands(root: Path, fp: str) -> list[list[str]]:
    """Every command that reads or writes a state file, in an order that makes each one exist."""
    at = ["--cache-dir", str(root)]
    return [
        ["ls", str(root), "--json"],
        ["lineage", fp, *at],
        ["pin", fp, *at],
        ["stats", "--zero", *at],
        ["stats", *at],
        ["verify", "--deep", "--record", *at],
        ["verify", "--quarantine", "--yes", *at],
        ["verify", "--restore", *at],
        ["gc", "--older-than", "1s", "--dry-run", *at],
    ]


def _cache(base: Path) -> tuple[Path, str]:
    """A cache with a ledger record, a file to quarantine and `.cachetool/` with its folders."""
    root = base / "cache"
    files = synthesize_cache(root, 3)
    fp = files[-1].name[len("cache-") : -len(".arrow")]
    files[0].write_bytes(files[0].read_bytes()[:200])  # damaged: verify --quarantine moves it
    ledger = root / LEDGER_DIR / "ledger"
    ledger.mkdir(parents=True)
    rec = {"v": 1, "type": "transform", "seq": 0, "time": 1.0, "result": fp, "parents": ["p" * 16]}
    (ledger / "h-1-20200101T000000.000000Z.jsonl").write_text(json.dumps(rec) + "\n")
    for folder in ("leases", "quarantine"):
        (root / LEDGER_DIR / folder).mkdir()
    return root, fp


def _instance(pattern: str) -> str:
    """A name the pattern matches (the planted segment or lease sorts after the real ones)."""
    return pattern.replace("*", "zz-9-20300101T000000.000000Z")


def _outside(base: Path) -> Path:
    """Files of the user outside the root: a text file and an SQLite database."""
    home = base / "home"
    home.mkdir()
    (home / "bashrc").write_text("echo precious\n")
    db = sqlite3.connect(home / "mine.sqlite")
    db.execute("CREATE TABLE mine (x)")
    db.execute("INSERT INTO mine VALUES ('precious')")
    db.commit()
    db.close()
    return home


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if p.is_file() else b""
        out[os.fspath(p.relative_to(folder))] = (st.st_mode, st.st_mtime_ns, data)
    return out


def _plant(path: Path, how: str, home: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        path.rmdir()
    path.unlink(missing_ok=True)
    if how == "symlink-out":
        path.symlink_to(home / ("mine.sqlite" if "sqlite" in path.name else "bashrc"))
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


@pytest.fixture(scope="session")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """What `verify --deep` stores in the user's cache folder about the schemas of `_cache` (the
    same in every test's cache), from one real run: each test starts with it, so its `verify
    --deep` judges them without importing `datasets` (0.5 s of CPU per test). Empty if nothing
    was stored (each test then imports `datasets` again)."""

    def make(base: Path) -> bytes:
        root, _ = _cache(base)
        env = hf_env(base)
        _run(["verify", "--deep", "--cache-dir", str(root)], env)
        kept = Path(env["CACHETOOL_HOME"]) / "derived" / VERDICTS_NAME
        return kept.read_bytes() if kept.is_file() else b""

    return once_per_session(tmp_path_factory, "state_files_verdicts", make)[1]


def _env(base: Path, verdicts: bytes) -> dict[str, str]:
    """`hf_env(base)`, its user's cache folder holding `verdicts`."""
    env = hf_env(base)
    if verdicts:
        kept = Path(env["CACHETOOL_HOME"]) / "derived" / VERDICTS_NAME
        kept.parent.mkdir(parents=True)
        kept.write_bytes(verdicts)
    return env


#: Commands that import pyarrow whatever the state files hold: their warm parent has it imported.
WITH_PYARROW = ("verify", "gc")


def _run(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
    preload = ("pyarrow",) if cmd[0] in WITH_PYARROW else ()
    try:
        proc = forks.run(
            [sys.executable, "-m", "cachetool", *cmd],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            preload=preload,
        )
    except Exception as e:  # subprocess.TimeoutExpired: a hang
        pytest.fail(f"{cmd} did not end: {e}")
    return proc.returncode, proc.stderr


#: One state file replaced at a time (so no failure on another file hides it) by a link out of
#: the root, the case that could write into a file of the user's; the other substitutes replace
#: every state file at once (a reader skips what is not a regular file and goes on).
ONE_AT_A_TIME = [(name, "symlink-out") for name in STATE_FILES]
ALL_AT_ONCE = [("*", how) for how in SUBSTITUTES if how != "symlink-out"]


@pytest.mark.parametrize(("name", "how"), ONE_AT_A_TIME + ALL_AT_ONCE)
def test_a_state_file_replaced_by_a_link_fifo_device_or_folder(
    tmp_path: Path, name: str, how: str, verdicts: bytes
) -> None:
    """Every command that reads or writes a state file, with that file replaced: nothing outside
    the root is written (the user's text file and SQLite database are byte for byte the same),
    no command hangs, none ends in a traceback."""
    root, fp = _cache(tmp_path)
    home = _outside(tmp_path)
    before = _snapshot(home)
    for each in STATE_FILES if name == "*" else (name,):
        _plant(root / LEDGER_DIR / _instance(each), how, home)
    env = _env(tmp_path, verdicts)
    for cmd in _commands(root, fp):
        code, err = _run(cmd, env)
        assert "Traceback" not in err, (cmd, err[-2000:])
        assert code in (0, 1, 2), (cmd, code, err[-1000:])
    assert _snapshot(home) == before


CONTENTS = {
    "empty": b"",
    "truncated": b'{"v": 1, "pins": {"ab',
    "binary": bytes(range(256)) * 64,
    "not-utf8": b'{"v": 1, "files": {"\xff\xfe": {}}, "pins": {}}\n',
    "infinity": b'{"v": 1, "host": "h", "boot_id": "b", "pid": 1, "pid_ns": 1, "start": 1, '
    b'"renewed": Infinity, "lifetime": Infinity, "zeroed_at": NaN, "pins": {"x": NaN}}\n',
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "wrong-types": b'{"v": 1, "files": [1, 2], "pins": [], "verdicts": 5, "zeroed_at": "x",'
    b' "action": "quarantine", "from": 5, "to": null}\n',
}


@pytest.mark.parametrize("content", list(CONTENTS), ids=list(CONTENTS))
def test_any_content_of_every_state_file(tmp_path: Path, content: str, verdicts: bytes) -> None:
    """Every state file holding the same bad content at once (and one of 300 MB, sparse): every
    command ends normally, with no traceback."""
    root, fp = _cache(tmp_path)
    for name in STATE_FILES:
        path = root / LEDGER_DIR / _instance(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(CONTENTS[content])
    if content == "empty":  # and a huge one, sparse
        with open(root / LEDGER_DIR / "checksums.json", "wb") as f:
            f.truncate(300 << 20)
    env = _env(tmp_path, verdicts)
    for cmd in _commands(root, fp):
        code, err = _run(cmd, env)
        assert "Traceback" not in err, (cmd, err[-2000:])
        assert code in (0, 1, 2), (cmd, code, err[-1000:])


def test_quarantine_records_that_name_the_root_or_the_quarantine_are_refused(tmp_path: Path) -> None:
    """`verify --restore` checks each quarantine record before it acts: one whose "from" is the
    root itself, or whose "to" is the quarantine folder (or a run's folder) itself, moves
    nothing and is named in a warning; a line that is not UTF-8 is skipped with a warning."""
    root, _ = _cache(tmp_path)
    qbase = root / LEDGER_DIR / "quarantine"
    run = qbase / "20260101T000000-1"
    (run / "csv").mkdir(parents=True)
    (run / "csv" / "kept").write_text("quarantined")
    inside = root / "csv" / "kept"
    records = [
        {"action": "quarantine", "from": str(root), "to": str(run / "csv")},
        {"action": "quarantine", "from": str(inside), "to": str(qbase)},
        {"action": "quarantine", "from": str(inside), "to": str(run)},
    ]
    log = qbase / "log.jsonl"
    log.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + b'{"to": "\xff"}\n')
    before = _snapshot(root)
    code, err = _run(["verify", "--restore", "--cache-dir", str(root)], hf_env(tmp_path))
    assert "Traceback" not in err and code in (0, 1), err
    assert _snapshot(root) == before
    assert err.count("not restored") == 3 and "not a JSON record" in err
