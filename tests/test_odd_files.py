"""Nothing odd crashes `ls` or `show`: broken, foreign, special and hostile files."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cachetool.cache.layout import Kind
from cachetool.cache.scan import scan_cache
from cachetool.cli.app import app
from tests import forks
from tests.conftest import as_another_user, cachetool_run, hf_env, invoke

FP = "0123456789abcdef"


def write_stream(
    path: Path, rows: int = 100, batches: int = 4, fingerprint: str | None = FP, indices: bool = False
) -> None:
    meta = {"info": {"features": {"x": {"dtype": "int64", "_type": "Value"}}}}
    if fingerprint is not None:
        meta["fingerprint"] = fingerprint  # type: ignore[assignment]
    name, typ = ("indices", pa.uint64()) if indices else ("x", pa.int64())
    schema = pa.schema([(name, typ)], metadata={"huggingface": json.dumps(meta)})
    tmp = path.with_name("writing.tmp")  # pyarrow cannot open non-UTF-8 names; rename afterwards
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        per = rows // batches
        for b in range(batches):
            w.write_batch(pa.record_batch([pa.array(range(b * per, (b + 1) * per), type=typ)], schema=schema))
    os.rename(tmp, path)


@pytest.fixture
def odd_cache(tmp_path: Path) -> Path:
    """A dataset folder holding one good file and every kind of trouble."""
    root = tmp_path / "cache"
    ds = root / "csv" / "default-aaaa" / "0.0.0" / ("f" * 64)
    ds.mkdir(parents=True)
    (ds / "dataset_info.json").write_text(
        json.dumps({"splits": {"train": {"name": "train", "num_examples": 100}}})
    )
    write_stream(ds / "csv-train.arrow", fingerprint=None)
    write_stream(ds / f"cache-{FP}.arrow")
    good = (ds / f"cache-{FP}.arrow").read_bytes()
    (ds / "cache-1111111111111111.arrow").write_bytes(good[: len(good) - 8])  # cut at a message boundary
    (ds / "cache-2222222222222222.arrow").write_bytes(good[: len(good) // 2 + 3])  # cut mid-message
    (ds / "cache-3333333333333333.arrow").write_bytes(b"")
    (ds / "cache-4444444444444444.arrow").write_bytes(b"this is not arrow at all" * 10)
    with (
        pa.OSFile(str(ds / "cache-5555555555555555.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, pa.schema([("x", pa.int64())])) as w,
    ):
        w.write_batch(pa.record_batch([pa.array([1, 2])], names=["x"]))
    write_stream(
        ds / "cache-6666666666666666.arrow", fingerprint="9999999999999999"
    )  # name and metadata differ
    os.mkfifo(ds / "cache-7777777777777777.arrow")
    outside = tmp_path / "outside.arrow"
    write_stream(outside)
    (ds / "cache-8888888888888888.arrow").symlink_to(outside)
    (tmp_path / "outside_dir").mkdir()
    write_stream(tmp_path / "outside_dir" / f"cache-{'9' * 16}.arrow")
    (ds / "linked_dir").symlink_to(tmp_path / "outside_dir")
    write_stream(ds / os.fsdecode(b"cache-\xff\xfe.arrow"))
    write_stream(ds / "cache-[bold red]boom.arrow")
    write_stream(ds / "cache-\x1b[31mred.arrow")
    return root


def test_scan_turns_every_problem_into_a_warning_not_a_crash(odd_cache: Path) -> None:
    report = scan_cache(odd_cache)
    kinds = {e.path.name: (e.kind, tuple(map(str, e.problems))) for e in report.entries}
    assert kinds[f"cache-{FP}.arrow"] == (Kind.DERIVED, ())
    assert kinds["cache-1111111111111111.arrow"][0] == Kind.DERIVED
    assert "no end-of-stream marker after 4 batches (100 rows)" in kinds["cache-1111111111111111.arrow"][1][0]
    assert kinds["cache-2222222222222222.arrow"][0] == Kind.DERIVED
    assert kinds["cache-2222222222222222.arrow"][1][0].startswith("truncated after")
    assert kinds["cache-3333333333333333.arrow"] == (Kind.UNREADABLE, ("empty file (0 bytes)",))
    assert kinds["cache-4444444444444444.arrow"][0] == Kind.UNREADABLE
    assert kinds["cache-4444444444444444.arrow"][1][0].startswith("not an Arrow IPC stream")
    assert kinds["cache-5555555555555555.arrow"][1] == (
        "Arrow IPC file format, but datasets reads the stream format",
    )
    assert kinds["cache-6666666666666666.arrow"][1] == (
        "file holds fingerprint 9999999999999999, name says 6666666666666666",
    )
    assert kinds["cache-7777777777777777.arrow"] == (Kind.OTHER, ("not a regular file (FIFO)",))
    link = kinds["cache-8888888888888888.arrow"]
    assert link[0] == Kind.OTHER and link[1][0].startswith("symlink to ") and "not followed" in link[1][0]
    assert kinds["linked_dir"][0] == Kind.OTHER  # a symlinked folder is listed, never walked
    assert not any("outside_dir" in str(e.path) or e.fingerprint == "9" * 16 for e in report.entries)
    assert kinds[os.fsdecode(b"cache-\xff\xfe.arrow")][0] == Kind.DERIVED
    assert {w.path.name for w in report.warnings} >= {
        "cache-1111111111111111.arrow",
        "cache-2222222222222222.arrow",
        "cache-3333333333333333.arrow",
        "cache-4444444444444444.arrow",
        "cache-7777777777777777.arrow",
    }


def test_ls_survives_and_escapes_hostile_names(odd_cache: Path) -> None:
    """Exit 0, one hint line on stderr, markup and escape sequences shown literally."""
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "ls", str(odd_cache)],
        capture_output=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "\x1b" not in out  # no terminal escape reaches the terminal
    assert "[bold red]boom" in out and "\\x1b[31mred" in out and "\\xff\\xfe" in out
    err = proc.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Hint: ") and "run `cachetool verify --cache-dir " in err[0]
    doc = json.loads(
        forks.run(
            [sys.executable, "-m", "cachetool", "ls", str(odd_cache), "--json"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    )
    names = {Path(e["path"]).name for e in doc["entries"]}
    assert "cache-\x1b[31mred.arrow" in names and "cache-\udcff\udcfe.arrow" in names


def test_show_of_a_truncated_file_says_what_is_wrong(odd_cache: Path) -> None:
    result = CliRunner().invoke(
        app, ["show", "1111111111111111", "--cache-dir", str(odd_cache), "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["complete"] is False and doc["rows"] == 100
    assert doc["files"][0]["error"].startswith("no end-of-stream marker")


def test_listing_never_moves_access_times(odd_cache: Path) -> None:
    target = next(odd_cache.rglob(f"cache-{FP}.arrow"))
    os.utime(target, (1_000_000_000, 1_000_000_000))
    scan_cache(odd_cache, use_index=False)
    assert os.stat(target).st_atime == 1_000_000_000


def test_read_only_root_still_lists(odd_cache: Path) -> None:
    """A cache on a read-only mount lists; the read index is simply not written."""
    for dirpath, _, _ in os.walk(odd_cache):
        os.chmod(dirpath, 0o555)
    try:
        if os.access(odd_cache, os.W_OK):  # root ignores modes: drop privileges in a child instead
            assert _assert_as_nobody(odd_cache, "readonly")["kinds"]
        else:
            assert scan_cache(odd_cache).entries
    finally:
        for dirpath, _, _ in os.walk(odd_cache):
            os.chmod(dirpath, 0o755)


def test_permission_denied_files_and_folders_become_warnings(odd_cache: Path) -> None:
    ds = next(odd_cache.rglob("dataset_info.json")).parent
    secret = ds / "cache-abababababababab.arrow"
    write_stream(secret)
    os.chmod(secret, 0o000)
    (ds / "private").mkdir()
    os.chmod(ds / "private", 0o000)
    _make_traversable(odd_cache)
    result = _assert_as_nobody(odd_cache, "denied") if os.geteuid() == 0 else _scan_here(odd_cache)
    assert ["permission denied"] in [p for _, p in result["problems"] if p]
    assert any(n == "private" and k == "unreadable" for n, k in result["kinds"])


def _make_traversable(root: Path) -> None:
    p = root
    while p != p.parent:
        try:
            os.chmod(p, os.stat(p).st_mode | 0o005)
        except PermissionError:
            break
        p = p.parent


def _scan_here(root: Path) -> dict[str, Any]:
    report = scan_cache(root)
    return {
        "problems": [(e.path.name, [str(p) for p in e.problems]) for e in report.entries],
        "kinds": [(e.path.name, e.kind.value) for e in report.entries],
    }


def _assert_as_nobody(root: Path, what: str) -> dict[str, Any]:
    """Scan as an unprivileged user in a forked child: the kernel, not a mock, says no."""
    _make_traversable(root)
    return as_another_user(lambda: _scan_here(root))  # type: ignore[no-any-return]


WRITER = """
import json, sys, time
import pyarrow as pa
schema = pa.schema([("x", pa.int64())], metadata={"huggingface": json.dumps({"fingerprint": sys.argv[2]})})
with pa.OSFile(sys.argv[1], "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
    w.write_batch(pa.record_batch([pa.array(range(10))], schema=schema))
    sink.flush()
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
def test_ls_and_show_say_an_arrow_file_a_live_process_writes_is_being_written(odd_cache: Path) -> None:
    """A `cache-<hex>.arrow` another process is writing right now (no end-of-stream marker yet) is
    "being written by pid N" in `show` and not one of the problems `ls` counts, as `verify` says."""
    fp = "abcdabcdabcdabcd"
    path = next(odd_cache.rglob("dataset_info.json")).parent / f"cache-{fp}.arrow"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), fp], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        run = CliRunner().invoke
        listed = json.loads(run(app, ["ls", str(odd_cache), "--json"], catch_exceptions=False).stdout)
        assert str(path) not in [w["path"] for w in listed["warnings"]]
        shown = json.loads(run(app, ["show", fp, "--cache-dir", str(odd_cache), "--json"]).stdout)
        assert shown["problems"] == [f"being written by pid {writer.pid}"]
    finally:
        writer.kill()
        writer.wait()


def test_quarantine_leaves_a_file_of_another_user_it_cannot_read(odd_cache: Path) -> None:
    """In a shared cache (folders every user may write), a cache file of another user that this
    user may not read is not proven damaged: `verify --quarantine` (`quarantine(report)`) leaves
    it where it is, saying why, instead of moving that user's data aside, and `verify` says whose
    file it is instead of hinting to move it aside."""
    from cachetool.maintenance.verify import verify_cache
    from cachetool.maintenance.verify.quarantine import quarantine

    if os.geteuid() != 0:
        pytest.skip("another user's file needs root to make")
    ds = next(odd_cache.rglob("dataset_info.json")).parent
    for p in ds.glob("cache-*"):
        if p.name != f"cache-{FP}.arrow":
            p.unlink()  # the other kinds of trouble are other tests'
    secret = ds / "cache-abababababababab.arrow"
    write_stream(secret, fingerprint="abababababababab")
    os.chmod(secret, 0o000)
    _make_traversable(odd_cache)
    for dirpath, _, _ in os.walk(odd_cache):
        os.chmod(dirpath, 0o777)
    quarantine(verify_cache(odd_cache))  # imports what the child needs (nothing to move as root)
    codecs.lookup("ascii")  # and the codec it reads /proc with: this interpreter's files are root's

    def quarantined() -> list[Any]:
        done = quarantine(verify_cache(odd_cache))
        return [(f.code, f.problem) for f in done.findings] + [
            f.hint for f in done.findings if f.path == secret
        ]

    got = as_another_user(quarantined)
    assert secret.exists()
    assert (
        "not-quarantined",
        "not quarantined: another user's file this user may not read: it may be whole",
    ) in [tuple(x) for x in got], got
    # and verify does not tell this user to move it aside (it said "move it aside with `cachetool
    # verify --quarantine`", which then moved nothing)
    assert "another user's file (uid 0): its owner or root can check it" in got, got


@pytest.mark.slow
def test_a_folder_named_like_a_cache_file_is_named_by_the_verify_explain_points_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder `cache-<fp>.arrow` in a saved folder makes the traced map whose file that is fail
    ("Expected file path, but … is a directory"); `explain --last` says to run `cachetool verify`,
    which now names the folder in a warning, `ls` hints at it, and `show` of the folder by its name
    shows it (it said "no cache entry matches"). verify found nothing."""
    env = hf_env(tmp_path)
    (tmp_path / "p.py").write_text(
        "import datasets\n"
        "datasets.Dataset.from_dict({'a': [1, 2]}).save_to_disk('s')\n"
        f"datasets.load_from_disk('s').map(lambda r: {{'b': 1}}, new_fingerprint='{FP}')\n"
    )
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / f"cache-{FP}.arrow").mkdir()
    assert cachetool_run("p.py", env=env, cwd=tmp_path, check=False, warm=True).returncode == 1
    root = str(tmp_path / "s")
    verify = f"cachetool verify --cache-dir {root}"
    explained = " ".join(invoke("explain", "--last", "--cache-dir", root, env=env).stdout.split())
    assert f"is a directory). A cache file it read may be damaged; to find it, run: {verify}" in explained
    doc = json.loads(invoke("verify", "--cache-dir", root, "--json", env=env).stdout)
    (finding,) = doc["findings"]
    assert (finding["path"], finding["severity"]) == (f"{root}/cache-{FP}.arrow", "warning"), finding
    assert "a folder" in finding["problem"], finding
    assert f"cache-{FP}.arrow" in invoke("ls", root, env=env).stderr
    monkeypatch.chdir(root)  # `show` of the folder by its name, as typed where it lies
    shown = invoke("show", f"cache-{FP}.arrow", "--json", env=env)
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["path"] == f"{root}/cache-{FP}.arrow", shown.stdout


def test_show_of_a_result_in_a_folder_this_user_may_not_read_names_the_folder(tmp_path: Path) -> None:
    """`cachetool show PREFIX` of a result that lies in a folder another user made under umask 077
    says it found no entry and names the folder this user may not read, instead of only "no cache
    entry matches"."""
    if os.geteuid() != 0:
        pytest.skip("another user's folder needs root to make")
    root = tmp_path / "cache"
    hidden = root / "saved"
    hidden.mkdir(parents=True)
    write_stream(hidden / "cache-abababababababab.arrow", fingerprint="abababababababab")
    _make_traversable(root)
    os.chmod(root, 0o755)
    os.chmod(hidden, 0o700)
    run = CliRunner().invoke
    assert run(app, ["show", "abab", "--cache-dir", str(root)]).exit_code == 0  # imports, as root
    said = as_another_user(lambda: run(app, ["show", "abab", "--cache-dir", str(root)]).stderr)
    assert said == f"Error: no cache entry matches 'abab' in {root} (this user may not read {hidden})\n", said
