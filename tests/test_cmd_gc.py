"""`cachetool gc` on real caches: leftovers of real SIGKILLs, live writers, memory maps, symlink
attacks, eviction by age and size, pins and their recorded ancestors."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app
from cachetool.maintenance.gc import GcOptions
from cachetool.maintenance.gc.execute import execute, gc_lock
from cachetool.maintenance.gc.plan import GcBusy, plan_gc
from tests import forks
from tests.conftest import hf_env, short_tmp_dir

DAY = 86400.0


# ------------------------------------------------------------------------------------------
# Fixtures: one real cache with leftovers, built once per session (shared by xdist workers)
# ------------------------------------------------------------------------------------------


def cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)
    return result


def tree(base: Path) -> dict[str, tuple[str, int, str]]:
    """Every path below `base` (links not followed): type, size and a digest of the content."""
    out: dict[str, tuple[str, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            rel = str(p.relative_to(base))
            if p.is_symlink():
                out[rel] = ("link", 0, os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", 0, "")
            else:
                out[rel] = ("file", st.st_size, hashlib.sha256(p.read_bytes()).hexdigest()[:16])
    return out


def expand(base: Path, rels: list[str]) -> set[str]:
    """The paths themselves and, for folders, everything inside."""
    out = set()
    for rel in rels:
        out.add(rel)
        p = base / rel
        if p.is_dir() and not p.is_symlink():
            out |= {str(q.relative_to(base)) for q in p.rglob("*")}
    return out


def gc_json(base: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli("gc", "--cache-dir", str(base / "cache"), "--json", *args)
    assert result.stdout, f"exit {result.exit_code}: {result.stderr}"
    return result.exit_code, json.loads(result.stdout)


def set_age(paths: list[Path], days: float) -> None:
    t = time.time() - days * DAY
    for p in paths:
        for q in [p, *(p.rglob("*") if p.is_dir() else [])]:
            os.utime(q, (t, t), follow_symlinks=False)


def cache_file(base: Path, made: dict[str, Any], fp: str) -> list[Path]:
    return sorted((base / made["csv_dir"]).glob(f"cache-{fp}*.arrow"))


# ------------------------------------------------------------------------------------------
# Leftovers
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gc_temp_removes_exactly_the_leftovers_of_killed_processes(
    copy: Path, leftovers: dict[str, Any]
) -> None:
    """After a killed map, num_proc map, prepare, save, uncached run and download,
    `gc --temp --min-age 0 -y` removes their leftovers and nothing else, and logs each removal
    in the ledger."""
    lo = leftovers["leftovers"]
    assert len(lo["killed_worker"]) == 2
    assert sorted((copy / p).stat().st_size == 0 for p in lo["killed_worker"]) == [False, True]
    builder_lock = next(p for p in lo["killed_prepare_locks"] if p.endswith("_builder.lock"))
    expected = expand(
        copy,
        lo["killed_map"]
        + lo["killed_worker"]
        + lo["killed_prepare"]
        + lo["killed_save"]
        + lo["killed_uncached"]
        + lo["killed_download"]
        + lo["killed_download_prepare"],
    ) | {builder_lock}
    before = tree(copy)
    code, doc = gc_json(copy, "--temp", "--tmp-dir", str(copy / "tmp"), "--min-age", "0", "-y")
    assert code == 0, doc
    after = tree(copy)
    assert set(before) - set(after) == expected
    # A root lock names its folder's absolute path, which is in the original cache: there the
    # interrupted preparations still exist, so in this copy the root locks guard something and stay.
    root_locks = [p for p in lo["killed_prepare_locks"] if p != builder_lock] + lo[
        "killed_download_root_lock"
    ]
    assert len(root_locks) == 2 and all(p in after for p in root_locks)
    assert all(p.startswith("cache/.cachetool/") for p in set(after) - set(before))
    assert all(before[p] == after[p] for p in after if p in before)
    result = doc["result"]
    assert result["failed"] == [] and result["skipped"] == []
    assert len(result["removed"]) == 11
    assert result["freed_files"] == sum(1 for p in expected if before[p][0] == "file")
    assert result["freed_bytes"] == sum(before[p][1] for p in expected)
    kinds = {"temp", "incomplete-prepare", "incomplete-save", "lock", "download"}
    assert {r["kind"] for r in result["removed"]} == kinds

    from cachetool.history.ledger import read_ledger

    records = read_ledger(copy / "cache").gc_records()
    assert sorted(r.path or "" for r in records) == sorted(r["path"] for r in result["removed"])
    assert all(r.reason and r.size is not None for r in records)

    code, doc = gc_json(copy, "--temp", "--tmp-dir", str(copy / "tmp"), "--min-age", "0", "-y")
    assert code == 0 and doc["plan"]["items"] == [] and doc["result"]["removed"] == []


@pytest.mark.slow
def test_gc_temp_imports_no_ledger_reader_remote_or_hashing(copy: Path, leftovers: dict[str, Any]) -> None:
    """`gc --temp -y` of a cache listed before removes the leftovers of killed processes and loads
    only what it needs: not the step records, the remote command or the fingerprint hashing (each
    one a cost every such gc paid)."""
    assert cli("ls", "--cache-dir", str(copy / "cache")).exit_code == 0  # the read index, warm
    code = (
        "import sys, runpy\n"
        "sys.argv = ['cachetool', 'gc', '--temp', '--min-age', '0', '-y', '--cache-dir', sys.argv[1]]\n"
        "try:\n    runpy.run_module('cachetool', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print(' '.join(m for m in sys.modules if m.startswith('cachetool')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(copy / "cache")], capture_output=True, text=True, check=True
    )
    *shown, modules = proc.stdout.strip().splitlines()
    assert any(line.startswith("Removed ") for line in shown), proc.stdout
    loaded = set(modules.split())
    unneeded = {"cachetool.history.records.steps", "cachetool.cli.remote", "cachetool.fingerprint"}
    assert not loaded & unneeded and len(loaded) <= 40, sorted(loaded)


@pytest.mark.slow
def test_one_failing_item_never_stops_the_rest(copy: Path, leftovers: dict[str, Any]) -> None:
    """An item that cannot be removed (an immutable file) fails alone: the others go, exit 1."""
    stuck = copy / leftovers["leftovers"]["killed_map"][0]
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        code, doc = gc_json(copy, "--temp", "--tmp-dir", str(copy / "tmp"), "--min-age", "0", "-y")
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert code == 1, doc["plan"]["skipped"]
    result = doc["result"]
    assert [(f["path"], f["status"]) for f in result["failed"]] == [(str(stuck), "failed")]
    assert "Operation not permitted" in result["failed"][0]["reason"]
    assert len(result["removed"]) == 10 and stuck.exists(), doc["plan"]["skipped"]


@pytest.mark.slow
def test_dry_run_min_age_and_confirmation(copy: Path, leftovers: dict[str, Any]) -> None:
    """--dry-run and a missing --yes change nothing; fresh leftovers are younger than the default
    --min-age (a killed map's partial output: resumable, kept a day) and stay, with the reason."""
    before = tree(copy)
    args = ["gc", "--cache-dir", str(copy / "cache"), "--temp", "--tmp-dir", str(copy / "tmp")]
    dry = cli(*args, "--min-age", "0", "--dry-run")
    assert dry.exit_code == 0
    assert "Would free" in dry.stdout and "keeps" in dry.stdout
    refused = cli(*args, "--min-age", "0")
    assert refused.exit_code == 2
    assert "pass --yes" in refused.stderr
    code, doc = gc_json(copy, "--temp", "--tmp-dir", str(copy / "tmp"), "-y")  # default --min-age 1h
    assert code == 0 and doc["plan"]["items"] == []
    reasons = {s["reason"] for s in doc["plan"]["skipped"]}
    assert reasons and all("younger than --min-age 1h" in r or "resumable partial of " in r for r in reasons)
    assert any("resumable partial of " in r for r in reasons), reasons  # killed_map's partial
    after = tree(copy)
    assert {k: v for k, v in after.items() if not k.startswith("cache/.cachetool")} == {
        k: v for k, v in before.items() if not k.startswith("cache/.cachetool")
    }
    quiet = cli(*args, "--min-age", "0", "--dry-run", "-q")
    assert quiet.exit_code == 0 and len(quiet.stdout.splitlines()) == 11


@pytest.mark.slow
def test_leftovers_named_on_the_command_line(copy: Path, leftovers: dict[str, Any]) -> None:
    """`cachetool gc $(cachetool ls -q --filter kind=temp)` removes exactly the listed leftovers,
    under the same checks as --temp."""
    ls = cli("ls", "--cache-dir", str(copy / "cache"), "-q", "--filter", "kind=temp")
    named = ls.stdout.split()
    assert sorted(named) == sorted(
        str(copy / p) for p in leftovers["leftovers"]["killed_worker"] + leftovers["leftovers"]["killed_map"]
    )
    code, doc = gc_json(copy, named[0], "--min-age", "0", "-y")
    assert code == 0 and [r["path"] for r in doc["result"]["removed"]] == [named[0]]
    assert all(Path(p).exists() for p in named[1:])


@pytest.mark.slow
def test_a_named_lock_of_a_live_folder_is_kept_with_its_reason(copy: Path, leftovers: dict[str, Any]) -> None:
    """`cachetool gc $(cachetool ls -q --filter kind=lock)` names each lock `load_dataset` left
    beside a prepared split it still guards: gc keeps it and says why (code `lock-live`), and,
    as for any entry named but kept, exits 1 (a dry run: 0, as a preview, with a warning)."""
    csv_dir = copy / leftovers["csv_dir"]
    lock = csv_dir.parent / f"{csv_dir.name}_builder.lock"
    assert lock.exists() and str(lock) in cli("ls", "--cache-dir", str(copy / "cache"), "-q").stdout.split()
    for extra, want in ((["--dry-run"], 0), (["-y"], 1)):
        code, doc = gc_json(copy, str(lock), "--min-age", "0", *extra)
        assert code == want and doc["plan"]["items"] == [], doc["plan"]["items"]
        assert [(s["path"], s["code"]) for s in doc["plan"]["skipped"]] == [(str(lock), "lock-live")]
        assert csv_dir.name in doc["plan"]["skipped"][0]["reason"]
    assert lock.exists()


@pytest.mark.slow
def test_naming_only_an_entry_gc_does_not_evict_removes_nothing_else(
    copy: Path, leftovers: dict[str, Any]
) -> None:
    """`cachetool gc <path of a file that is no cache file>` (a cut copy of a cache file, an
    `other` entry) keeps it, says why, exits 1 (a dry run: 0, as a preview) and plans nothing
    else: the names given narrow the run even when none of them can be evicted (every cache file
    of the dataset was planned)."""
    csv_dir = copy / leftovers["csv_dir"]
    stray = csv_dir / "tmpcut0001"
    stray.write_bytes(next(csv_dir.glob("cache-*.arrow")).read_bytes()[:1000])
    before = sorted(p.name for p in csv_dir.iterdir())
    for extra in ([], ["--older-than", "0s"]):
        code, doc = gc_json(copy, str(stray), "--min-age", "0", "--dry-run", *extra)
        assert code == 0 and doc["plan"]["items"] == [], doc["plan"]["items"]
        assert [s["path"] for s in doc["plan"]["skipped"]] == [str(stray)]
    code, doc = gc_json(copy, str(stray), "--min-age", "0", "-y")
    assert code == 1 and doc["result"]["removed"] == []
    assert sorted(p.name for p in csv_dir.iterdir()) == before


@pytest.mark.slow
def test_gc_never_removes_the_tmp_file_of_a_live_writer(copy: Path, leftovers: dict[str, Any]) -> None:
    """A map runs in another process while `gc --temp --min-age 0 -y` runs in a loop: its tmp
    file is never removed, the map completes, and its cache file loads."""
    # The map waits at row 150 until the test has run gc twice beside its tmp file (`release`):
    # that gate, not a pace of its rows, makes gc run while the file is written.
    code = (
        "import json, os, sys, time\n"
        "from datasets import Dataset, load_dataset\n"
        "ds = load_dataset('csv', data_files=sys.argv[1], split='train')\n"
        "print('ready', flush=True)\n"
        "def slow(x):\n"
        "    deadline = time.time() + 120\n"
        "    while x['id'] == 150 and not os.path.exists(sys.argv[2]) and time.time() < deadline:\n"
        "        time.sleep(0.01)\n"
        "    return {'live': x['id'] * 3}\n"
        "out = ds.map(slow, writer_batch_size=5)\n"
        "again = Dataset.from_file(out.cache_files[0]['filename'])\n"
        "print(json.dumps({'fp': out._fingerprint, 'rows': again.num_rows, 'sum': sum(again['live'])}))\n"
    )
    csv_dir = copy / leftovers["csv_dir"]
    initial_tmp = {p.name for p in csv_dir.glob("tmp*")}
    release = copy / "release"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, leftovers["csv"], str(release)],
        env=hf_env(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    removed: set[str] = set()
    runs_during_write = 0
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready": datasets imported and the csv loaded; the map starts
        while proc.poll() is None:
            live = {p.name for p in csv_dir.glob("tmp*")} - initial_tmp
            code_, doc = gc_json(copy, "--temp", "--tmp-dir", str(copy / "tmp"), "--min-age", "0", "-y")
            assert code_ == 0, doc
            removed |= {Path(r["path"]).name for r in doc["result"]["removed"]}
            if live and live <= {p.name for p in csv_dir.glob("tmp*")}:
                runs_during_write += 1
            if runs_during_write >= 2:
                release.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert runs_during_write >= 2, "gc never ran while the writer's tmp file existed"
    assert removed & {n for n in removed if n.startswith("tmp")} <= initial_tmp
    got = json.loads(out.strip().splitlines()[-1])
    assert got["rows"] == 300 and got["sum"] == 3 * sum(range(300))
    assert (csv_dir / f"cache-{got['fp']}.arrow").is_file()


#: Holds the files named in argv[2:] open (the first argv[1] of them) or memory-mapped (the
#: others, their descriptors closed), says "ready", and sleeps until stdin closes.
HOLDER = """import mmap, os, sys
n, paths = int(sys.argv[1]), sys.argv[2:]
fds = [os.open(p, os.O_RDONLY) for p in paths[:n]]
maps = []
for p in paths[n:]:
    fd = os.open(p, os.O_RDONLY)
    maps.append(mmap.mmap(fd, 0, prot=mmap.PROT_READ))
    os.close(fd)
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_gc_of_many_leftovers_reads_proc_once_and_never_removes_a_held_file(
    copy: Path, leftovers: dict[str, Any], tmp_path: Path
) -> None:
    """gc of 300 leftover tmp files reads `/proc` a fixed number of times, not once per item
    (so its time does not grow as items × processes), and stays sound: a live process that opened
    or mapped some of them after the liveness snapshot was taken (a snapshot handed to
    `execute()`) still keeps them: the final check, one pass over `/proc` for every item set
    aside, finds them and puts them back; every other leftover is removed."""
    from cachetool.maintenance import liveness

    csv_dir = copy / leftovers["csv_dir"]
    head = next(csv_dir.glob("cache-*.arrow")).read_bytes()[:600]  # a killed writer's partial stream
    extra = [csv_dir / f"tmpmany{i:04d}" for i in range(300)]
    for p in extra:
        p.write_bytes(head)
    empty_tmp = tmp_path / "tmp"
    empty_tmp.mkdir()
    options = GcOptions(temp=True, tmp_dir=empty_tmp, min_age=0)
    passes = liveness.proc_passes
    plan = plan_gc(copy / "cache", options)
    assert liveness.proc_passes - passes <= 2  # the planning snapshot (and the tf.data check)
    assert {p for p in extra} <= {i.path for i in plan.items}
    snapshot = liveness.scan_in_use(writers=False)  # taken before the holder opens anything
    held = extra[10:13] + extra[200:203]
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "3", *map(str, held)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        passes = liveness.proc_passes
        result = execute(plan, in_use=snapshot)
        passes = liveness.proc_passes - passes
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    by_path = {o.item.path: o for o in result.outcomes}
    assert {p: by_path[p].reason for p in held} == {
        p: f"became in use by pid {proc.pid} (put back)" for p in held
    }
    assert all(p.exists() for p in held)
    assert [p for p in extra if p not in held and p.exists()] == []
    assert {by_path[p].status for p in extra if p not in held} == {"removed"}
    # One final pass for the tmp files (and one more before the locks, which are judged only
    # once the folders before them are gone for good): not one per item.
    assert passes <= 2, passes


@pytest.mark.slow
def test_a_memory_mapped_entry_is_in_use_and_skipped_by_max_size(
    copy: Path, leftovers: dict[str, Any]
) -> None:
    """A process holding a dataset memory-mapped keeps it through --max-size eviction: the plan
    says "in use by pid N", and execute() re-checks a plan made before the process mapped it."""
    derived = leftovers["derived"]
    target = cache_file(copy, leftovers, derived)[0]
    stale_plan = plan_gc(copy / "cache", GcOptions(max_size=0, min_age=0))
    assert derived in {i.fingerprint for i in stale_plan.items}
    code = (
        "import sys, time\n"
        "from datasets import Dataset\n"
        "ds = Dataset.from_file(sys.argv[1])\n"
        "print(len(ds), flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(target)], env=hf_env(copy), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "300"
        result = execute(stale_plan)
        by_fp = {o.item.fingerprint: o for o in result.outcomes}
        assert by_fp[derived].status == "skipped"
        assert by_fp[derived].reason == f"in use by pid {proc.pid}"
        assert target.exists()
        assert {o.status for fp, o in by_fp.items() if fp != derived} == {"removed"}

        fresh = plan_gc(copy / "cache", GcOptions(max_size=0, min_age=0))
        assert [s.reason for s in fresh.skipped if s.fingerprint == derived] == [f"in use by pid {proc.pid}"]
        assert derived not in {i.fingerprint for i in fresh.items}
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_live_multiprocess_manager_keeps_its_pymp_folder(tmp_path: Path, isolated_env: Path) -> None:
    """A pymp-* folder stays while the Manager that listens in it lives (even orphaned by a
    SIGKILLed parent), and the reason names that process, its pid and its command (it did not say
    which process); the folder goes once it is dead."""
    tmp = short_tmp_dir(tmp_path)  # the manager's socket path must stay under 108 bytes
    cache = tmp_path / "cache"
    cache.mkdir()
    code = (
        "import multiprocess, time\n"
        "m = multiprocess.Manager()\n"
        "print(m._process.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**hf_env(tmp_path), "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    manager = int(proc.stdout.readline())
    try:
        proc.kill()
        proc.wait()
        (pymp,) = tmp.glob("pymp-*")
        code_, doc = gc_json(tmp_path, "--temp", "--tmp-dir", str(tmp), "--min-age", "0", "-y")
        assert code_ == 0 and doc["plan"]["items"] == []
        (reason,) = [s["reason"] for s in doc["plan"]["skipped"]]
        assert reason.startswith(f"a live process listens on a socket inside: pid {manager} (python"), reason
        assert "multiprocess.Manager()" in reason, reason
        assert pymp.exists()
    finally:
        os.kill(manager, signal.SIGKILL)
    deadline = time.time() + 10
    while not _dead(manager) and time.time() < deadline:
        time.sleep(0.01)
    code_, doc = gc_json(tmp_path, "--temp", "--tmp-dir", str(tmp), "--min-age", "0", "-y")
    assert code_ == 0 and [r["path"] for r in doc["result"]["removed"]] == [str(pymp)]
    assert not pymp.exists()


def _dead(pid: int) -> bool:
    """Process `pid` is gone or a zombie (its files and sockets closed; init reaps an orphan when
    it gets to it, a second or more later)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] in ("Z", "X")


@pytest.mark.slow
def test_an_idle_uncached_pipeline_keeps_its_hf_datasets_folder(
    copy: Path, leftovers: dict[str, Any]
) -> None:
    """A live pipeline with caching disabled holds nothing open in its hf_datasets-* folder
    between maps; gc keeps the folder while the process lives and removes it after."""
    code = (
        "import gc, sys, time\n"
        "from datasets import disable_caching, load_dataset\n"
        "disable_caching()\n"
        "ds = load_dataset('csv', data_files=sys.argv[1], split='train')\n"
        "ds.map(lambda x: {'q': 1})\n"
        "gc.collect()\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    tmp = copy / "tmp"
    old = {p.name for p in tmp.glob("hf_datasets-*")}
    set_age(list(tmp.glob("hf_datasets-*")), 1)  # left by a run killed yesterday
    proc = subprocess.Popen(
        [sys.executable, "-c", code, leftovers["csv"]],
        env=hf_env(copy, TMPDIR=str(tmp)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        (mine,) = [p for p in tmp.glob("hf_datasets-*") if p.name not in old]
        code_, doc = gc_json(copy, "--temp", "--tmp-dir", str(tmp), "--min-age", "0", "-y")
        assert code_ == 0
        skipped = {Path(s["path"]).name: s["reason"] for s in doc["plan"]["skipped"]}
        assert f"pid {proc.pid}" in skipped[mine.name]
        assert mine.exists() and not any((tmp / n).exists() for n in old)  # the killed run's folder went
    finally:
        proc.kill()
        proc.wait()
    code_, doc = gc_json(copy, "--temp", "--tmp-dir", str(tmp), "--min-age", "0", "-y")
    assert code_ == 0 and [r["path"] for r in doc["result"]["removed"]] == [str(mine)]


# ------------------------------------------------------------------------------------------
# Symlink attacks
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_symlinks_never_lead_gc_outside(copy: Path, leftovers: dict[str, Any], tmp_path: Path) -> None:
    """A tmp* symlink to an outside file, an hf_datasets-* symlink to an outside folder and a
    dataset folder that is a symlink to the outside: nothing outside is touched, by --temp or
    by eviction."""
    outside = tmp_path / "outside"
    victim = outside / "victim"
    victim.mkdir(parents=True)
    (outside / "secret.txt").write_text("keep me")
    src_dir = copy / leftovers["csv_dir"]
    for p in src_dir.glob("*"):
        shutil.copy2(p, victim / p.name)  # cache files, tmp files, source split: all look like a cache
    (victim / "tmpabcdefgh").write_bytes(b"x" * 100)
    (victim / "0.0.0.incomplete").mkdir()
    (victim / "0.0.0.incomplete" / "part-00000-00000-of-NNNNN.arrow").write_bytes(b"y")
    set_age([outside], 10)
    os.symlink(outside / "secret.txt", src_dir / "tmpzzzzzzzz")
    os.symlink(outside, copy / "tmp" / "hf_datasets-zzzzzzzz")
    os.symlink(victim, copy / "cache" / "linked")
    before = tree(outside)
    code, doc = gc_json(copy, "--temp", "--tmp-dir", str(copy / "tmp"), "--min-age", "0", "-y")
    assert code == 0
    assert "hf_datasets-zzzzzzzz" in {Path(s["path"]).name for s in doc["plan"]["skipped"]}
    code, doc = gc_json(copy, "--max-size", "0", "--include-sources", "--min-age", "0", "-y")
    assert code == 0 and doc["result"]["removed"]
    assert tree(outside) == before
    assert (src_dir / "tmpzzzzzzzz").is_symlink() and (copy / "cache" / "linked").is_symlink()
    assert (copy / "tmp" / "hf_datasets-zzzzzzzz").is_symlink()


@pytest.mark.slow
def test_a_folder_swapped_for_a_symlink_after_the_plan_redirects_nothing(
    copy: Path, leftovers: dict[str, Any], tmp_path: Path
) -> None:
    """Between plan and execute, folders are swapped for symlinks to decoys holding the same
    names: execute() skips those items and the decoys stay whole."""
    lo = leftovers["leftovers"]
    cache = copy / "cache"
    plan = plan_gc(cache, GcOptions(temp=True, tmp_dir=copy / "tmp", min_age=0, max_size=0))
    planned = {i.path for i in plan.items}
    csv_dir = copy / leftovers["csv_dir"]
    assert {copy / p for p in lo["killed_map"] + lo["killed_save"] + lo["killed_uncached"]} <= planned
    decoys = tmp_path / "decoys"
    swapped = {
        csv_dir: decoys / "csv",  # tmp files and cache-*.arrow of evictions
        cache / "saved" / "killed": decoys / "save",  # an interrupted save (the folder itself)
        copy / lo["killed_uncached"][0]: decoys / "uncached",  # an hf_datasets-* folder
        (copy / lo["killed_prepare"][0]).parent: decoys / "generator",  # the folder above .incomplete
    }
    moved = tmp_path / "moved"
    moved.mkdir()
    for i, (real, decoy) in enumerate(swapped.items()):
        shutil.copytree(real, decoy, symlinks=True)  # same names, same ages
        real.rename(moved / str(i))
        os.symlink(decoy, real)
    before = tree(decoys), tree(moved)
    result = execute(plan)
    assert (tree(decoys), tree(moved)) == before
    assert result.failed == ()
    assert result.skipped and all("symlink" in (o.reason or "") for o in result.skipped)
    swapped_items = [
        o for o in result.outcomes if any(o.item.path == r or r in o.item.path.parents for r in swapped)
    ]
    assert swapped_items and all(o.status == "skipped" for o in swapped_items)


# ------------------------------------------------------------------------------------------
# Eviction
# ------------------------------------------------------------------------------------------


def _age_everything(base: Path, made: dict[str, Any]) -> dict[str, list[Path]]:
    """Give every entry a known age: by fingerprint, the files that make it."""
    cache = base / "cache"
    files = {
        fp: cache_file(base, made, made[fp])
        for fp in ("chain_a", "chain_b", "derived", "indices", "shards", "train", "test")
    }
    assert len(files["shards"]) == 2
    ages = {"chain_a": 50, "chain_b": 45, "derived": 10, "indices": 5, "shards": 40, "train": 60, "test": 60}
    for fp, days in ages.items():
        set_age(files[fp], days)
    set_age([cache / "saved"], 100)
    src = base / made["csv_dir"]
    set_age([src / "csv-train.arrow", src / "dataset_info.json"], 100)
    return files


@pytest.mark.slow
def test_older_than_evicts_whole_entries_and_keeps_sources(copy: Path, leftovers: dict[str, Any]) -> None:
    """--older-than 30d evicts exactly the entries not used in 30 days (both shards of a num_proc
    map together); entries the ledger saw recently, sources and saved datasets stay."""
    files = _age_everything(copy, leftovers)
    code, doc = gc_json(copy, "--older-than", "30d", "--min-age", "0", "-y")
    assert code == 0
    removed = {r["fingerprint"]: r for r in doc["result"]["removed"]}
    # chain_a/chain_b were recorded by the tracer minutes ago: last used is the ledger's time.
    assert set(removed) == {leftovers["shards"], leftovers["train"], leftovers["test"]}
    assert sorted(removed[leftovers["shards"]]["paths"]) == sorted(str(p) for p in files["shards"])
    assert not any(p.exists() for p in files["shards"] + files["train"] + files["test"])
    assert all(p.exists() for fp in ("chain_a", "chain_b", "derived", "indices") for p in files[fp])
    kept = doc["plan"]["kept"]
    # The source split and its saved copy (same fingerprint) are parents in the ledger: used recently.
    assert kept["reasons"] == {"used in the last 30d": 6, "source splits and saved datasets": 2}
    assert kept["summary"].startswith(f"keeps {kept['entries']} entries")

    from cachetool.history.ledger import read_ledger

    assert {fp for r in read_ledger(copy / "cache").gc_records() for fp in r.fingerprints} >= set(removed)


@pytest.mark.slow
def test_include_sources_removes_a_saved_dict_as_one_folder(copy: Path, leftovers: dict[str, Any]) -> None:
    """With --include-sources a saved DatasetDict goes as one folder, and a source split goes
    with its dataset_info.json so datasets prepares it again."""
    _age_everything(copy, leftovers)
    code, doc = gc_json(copy, "--older-than", "90d", "--include-sources", "--min-age", "0", "--dry-run")
    (item,) = doc["plan"]["items"]
    assert (
        item["kind"] == "saved" and item["paths"] == [str(copy / "cache/saved/splits")] and item["files"] == 7
    )
    code, doc = gc_json(copy, "--older-than", "90d", "--include-sources", "--min-age", "0", "-y")
    # The source and its saved copy are recorded parents of the traced chain: used minutes ago.
    assert code == 0 and [Path(r["path"]).name for r in doc["result"]["removed"]] == ["splits"]
    code, doc = gc_json(copy, "--max-size", "0", "--include-sources", "--min-age", "0", "-y")
    assert code == 0
    removed = {Path(r["path"]).name: r for r in doc["result"]["removed"] if r["kind"] in ("saved", "source")}
    assert set(removed) == {"items", Path(leftovers["csv_dir"]).name}
    src = removed[Path(leftovers["csv_dir"]).name]
    assert [Path(p).name for p in src["paths"]] == ["dataset_info.json", "csv-train.arrow"]
    assert not (copy / "cache/saved/splits").exists() and not (copy / "cache/saved/items").exists()
    assert (copy / "cache/saved/killed").exists()  # a leftover, not an entry: only --temp removes it


@pytest.mark.slow
def test_max_size_evicts_least_recently_used_first(copy: Path, leftovers: dict[str, Any]) -> None:
    """--max-size removes the least recently used entries until the cache fits, no more."""
    from cachetool.cache.scan import scan_cache

    files = _age_everything(copy, leftovers)
    total = scan_cache(copy / "cache").size
    oldest = sum(p.stat().st_size for fp in ("train", "test", "shards") for p in files[fp])
    code, doc = gc_json(copy, "--max-size", str(total - oldest), "--min-age", "0", "--dry-run")
    assert code == 0 and doc["result"] is None
    assert [i["fingerprint"] for i in doc["plan"]["items"]][:2] in (
        [leftovers["train"], leftovers["test"]],
        [leftovers["test"], leftovers["train"]],
    )
    assert {i["fingerprint"] for i in doc["plan"]["items"]} == {
        leftovers["train"],
        leftovers["test"],
        leftovers["shards"],
    }
    assert doc["plan"]["bytes"] == oldest
    code, doc = gc_json(copy, "--max-size", str(total - oldest - 1), "--min-age", "0", "--dry-run")
    # The next least recently used: derived (10 days); the chain's ledger records are minutes old.
    assert {i["fingerprint"] for i in doc["plan"]["items"]} == {
        leftovers["train"],
        leftovers["test"],
        leftovers["shards"],
        leftovers["derived"],
    }


@pytest.mark.slow
def test_fingerprints_on_the_command_line_and_unknown_ones(copy: Path, leftovers: dict[str, Any]) -> None:
    """Positional fingerprints (as `ls -q` prints them) evict exactly those entries."""
    files = _age_everything(copy, leftovers)
    code, doc = gc_json(copy, leftovers["shards"][:8], leftovers["indices"], "--min-age", "0", "-y")
    assert code == 0
    assert {r["fingerprint"] for r in doc["result"]["removed"]} == {leftovers["shards"], leftovers["indices"]}
    assert not any(p.exists() for p in files["shards"] + files["indices"])
    assert all(p.exists() for p in files["derived"])
    _, doc = gc_json(copy, "--dataset", "csv", "--min-age", "0", "--dry-run")
    assert {i["fingerprint"] for i in doc["plan"]["items"]} == {
        leftovers[k] for k in ("chain_a", "chain_b", "derived", "train", "test")
    }
    assert doc["plan"]["kept"]["reasons"]["source splits and saved datasets"] == 1
    _, doc = gc_json(copy, "--dataset", "json", "--min-age", "0", "--dry-run")
    assert doc["plan"]["items"] == [] and doc["plan"]["kept"]["reasons"] == {"outside the selection": 9}
    res = cli("gc", "--cache-dir", str(copy / "cache"), "0123456789abcdef", "-y")
    assert res.exit_code == 2 and "no cache entry matches '0123456789abcdef'" in res.stderr


# ------------------------------------------------------------------------------------------
# Locks, ownership, concurrency, usage (small real folders, no datasets run)
# ------------------------------------------------------------------------------------------


@pytest.fixture
def lockroot(tmp_path: Path, isolated_env: Path) -> Iterator[Path]:
    root = tmp_path / "locks"
    (root / "csv" / "default" / "0.0.0" / "abc123abc123abc1").mkdir(parents=True)
    yield root


def _mangle(p: Path) -> str:
    return str(p).replace("/", "_") + ".lock"


def test_locks_go_only_when_free_and_their_folder_is_gone(lockroot: Path) -> None:
    """A lock is removed only when a non-blocking acquire succeeds and what it guards is gone;
    an `.incomplete_info.lock` of a live folder stays. Each kept lock says why, in words and as
    a code for scripts."""
    version = lockroot / "csv" / "default" / "0.0.0"
    live = version / "abc123abc123abc1"
    gone = version / "fedcba9876543210"
    names = {
        "live_builder": version / f"{live.name}_builder.lock",
        "live_info": version / f"{live.name}.incomplete_info.lock",
        "gone_builder": version / f"{gone.name}_builder.lock",
        "gone_info": version / f"{gone.name}.incomplete_info.lock",
        "root_live": lockroot / _mangle(live),
        "root_gone": lockroot / _mangle(gone),
        "held_gone": lockroot / _mangle(lockroot / "held" / "0.0.0"),
        # Only locks directly in the root are decoded as paths; elsewhere such a name is unknown.
        "not_in_root": version / _mangle(gone),
    }
    for p in names.values():
        p.touch()
    fd = os.open(names["held_gone"], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        res = cli(
            "gc",
            "--cache-dir",
            str(lockroot),
            "--temp",
            "--tmp-dir",
            str(lockroot / "csv"),
            "--min-age",
            "0",
            "-y",
            "--json",
        )
        assert res.exit_code == 0, res.stderr
        doc = json.loads(res.stdout)
    finally:
        os.close(fd)
    removed = {Path(r["path"]) for r in doc["result"]["removed"]}
    assert removed == {names["gone_builder"], names["gone_info"], names["root_gone"]}
    assert {Path(s["path"]): s["reason"] for s in doc["plan"]["skipped"]} == {
        names["held_gone"]: "held by a live process",
        names["not_in_root"]: "cannot tell which folder it guards",
    }
    assert {Path(s["path"]): s["code"] for s in doc["plan"]["skipped"]} == {
        names["held_gone"]: "lock-held",
        names["not_in_root"]: "guard-unknown",
    }
    assert all(p.exists() for k, p in names.items() if p not in removed)


@pytest.mark.slow
def test_a_temp_run_reads_neither_the_ledger_nor_the_pins(lockroot: Path, tmp_path: Path) -> None:
    """`gc --temp` plans leftovers without loading the ledger or the pins, which only protect
    entries from eviction: a temp-only run stays light."""
    (lockroot / "csv" / "default" / "0.0.0" / "fedcba9876543210.incomplete").mkdir()
    code = (
        "import sys\n"
        "from cachetool import gc_cache\n"
        f"run = gc_cache({str(lockroot)!r}, temp=True, min_age=0, tmp_dir={str(tmp_path)!r}, dry_run=True)\n"
        "print(len(run.plan.items), [m for m in ('cachetool.cache.pins', 'cachetool.history.ledger') "
        "if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["1", "[]"]


@pytest.mark.slow
def test_removing_one_leftover_loads_only_what_it_needs(lockroot: Path, tmp_path: Path) -> None:
    """`gc --temp -y` removing one tmp file of a killed writer loads no Arrow read index, no
    read-ahead, no fingerprint hashing, no ledger compaction and no lease writer: those serve
    data files, long ledgers and traced runs, which such a run does not meet."""
    folder = lockroot / "csv" / "default" / "0.0.0" / "abc123abc123abc1"
    (folder / "dataset_info.json").write_text('{"splits": {"train": {"num_examples": 1}}}')
    leftover = folder / "tmpabcd1234"
    leftover.write_bytes(b"\xff\xff\xff\xff")
    leftover.chmod(0o600)
    set_age([leftover], 1)
    (tmp_path / "tmp").mkdir()
    heavy = (
        "cachetool.cache.index",
        "cachetool.fingerprint.hashing",
        "cachetool.history.compact",
        "cachetool.trace.leases",
    )
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['cachetool', 'gc', '--temp', '-y', '--cache-dir', {str(lockroot)!r}, "
        f"'--tmp-dir', {str(tmp_path / 'tmp')!r}]\n"
        "try:\n"
        "    runpy.run_module('cachetool', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert not leftover.exists()
    assert proc.stdout.splitlines()[-1] == "[]"


def test_a_plan_is_plain_data(lockroot: Path) -> None:
    """Plans compare by value: a test (or a user) can assert a whole plan."""
    from cachetool.cache.layout import Kind
    from cachetool.cache.scan import scan_cache
    from cachetool.maintenance.gc.plan import GcItem, Rules, Target, build_plan
    from cachetool.maintenance.liveness import InUse

    lock = lockroot / "csv" / "default" / "0.0.0" / "0123456789abcdef_builder.lock"
    lock.touch()
    mtime = lock.stat().st_mtime
    options = GcOptions(temp=True, min_age=0)
    plan = build_plan(scan_cache(lockroot), Rules(options, InUse()))
    assert plan.items == (
        GcItem(
            lock,
            Kind.LOCK,
            0,
            1,
            "builder lock nobody holds; its folder is gone",
            (Target(lock, False, 0, mtime),),
            lock=lock,
        ),
    )
    assert plan.expected_freed == 0 and plan.expected_files == 1
    assert plan.keeps_sentence() == "keeps 0 entries (0 Bytes)"


def test_other_users_files_stay_unless_all_users(lockroot: Path) -> None:
    """A leftover owned by another uid is kept (and said so) unless --all-users."""
    version = lockroot / "csv" / "default" / "0.0.0"
    lock = version / "0123456789abcdef_builder.lock"
    lock.touch()
    os.chown(lock, 54321, 54321)
    args = ["gc", "--cache-dir", str(lockroot), "--temp", "--tmp-dir", str(version), "--min-age", "0", "-y"]
    doc = json.loads(cli(*args, "--json").stdout)
    assert doc["plan"]["items"] == []
    assert doc["plan"]["skipped"][0]["reason"] == "owned by uid 54321, not by you (pass --all-users)"
    doc = json.loads(cli(*args, "--json", "--all-users").stdout)
    assert [r["path"] for r in doc["result"]["removed"]] == [str(lock)]


def test_two_gc_runs_do_not_collide(lockroot: Path) -> None:
    """While one gc holds the cache's gc lock, another gives up with a clear message."""
    (lockroot / "csv" / "default" / "0.0.0" / "0123456789abcdef_builder.lock").touch()
    plan = plan_gc(lockroot, GcOptions(temp=True, tmp_dir=lockroot / "csv", min_age=0))
    assert len(plan.items) == 1
    with gc_lock(lockroot), pytest.raises(GcBusy, match="another cachetool gc is running"):
        execute(plan, lock_timeout=0.2)
    assert execute(plan).removed


def test_usage_errors(lockroot: Path) -> None:
    """Bad sizes and durations are usage errors (exit 2) quoting the value; nothing selected
    (an empty `ls -q` selection) is nothing to do, exit 0."""
    res = cli("gc", "--cache-dir", str(lockroot))
    assert res.exit_code == 0 and "nothing to do" in res.stderr
    res = cli("gc", "--cache-dir", str(lockroot), "--max-size", "12 parsecs")
    assert res.exit_code == 2 and "invalid --max-size '12 parsecs'" in res.stderr
    res = cli("gc", "--cache-dir", str(lockroot), "--temp", "--min-age", "soon")
    assert res.exit_code == 2 and "invalid --min-age 'soon'" in res.stderr
    res = cli("gc", "--cache-dir", str(lockroot), "--temp", "--min-age", "-5m")
    assert res.exit_code == 2 and res.stderr == "Error: invalid --min-age '-5m': '-5m' is negative\n"
    res = cli("gc", "--cache-dir", str(lockroot / "missing"), "--temp")
    assert res.exit_code == 2 and "cache directory not found" in res.stderr


def test_the_python_api_validates_and_runs_as_the_command_does(lockroot: Path) -> None:
    """From Python, `plan_gc(root, GcOptions())` says nothing is selected (it used to return an
    empty plan without a word), `GcOptions(tmp_dir=...)` without `temp` is refused with the
    command's message and exit code, and `gc_cache()` takes the command's keywords (strings as
    typed on the command line) and removes nothing without `yes=True` or a confirmation."""
    import inspect

    from cachetool.cli.common import params_of
    from cachetool.cli.gc import gc_command
    from cachetool.errors import CachetoolError
    from cachetool.maintenance.gc import NOTHING_SELECTED, ConfirmationNeeded, gc_cache

    # `--break-lease ID` is `break_lease(root, id)`, a function of its own (as `stats --zero` is).
    presentation = {"fmt", "as_json", "quiet", "no_truncate", "break_lease"}
    cli_keywords = set(params_of(gc_command)) - presentation
    assert cli_keywords == set(inspect.signature(gc_cache).parameters) - {"confirm"}
    plan = plan_gc(lockroot, GcOptions())
    assert plan.items == () and plan.warnings == (NOTHING_SELECTED,)
    with pytest.raises(CachetoolError, match="--tmp-dir only makes sense with --temp") as refused:
        GcOptions(tmp_dir=lockroot)
    assert refused.value.exit_code == 2
    res = cli("gc", "--cache-dir", str(lockroot), "--tmp-dir", str(lockroot))
    assert res.exit_code == 2 and str(refused.value) in res.stderr
    with pytest.raises(CachetoolError, match="cache directory not found"):
        plan_gc(lockroot / "missing", GcOptions(temp=True))
    with pytest.raises(CachetoolError, match="invalid --min-age 'soon'"):
        gc_cache(lockroot, temp=True, min_age="soon")
    lock = lockroot / "csv" / "default" / "0.0.0" / "0123456789abcdef_builder.lock"
    lock.touch()
    args: dict[str, Any] = {"temp": True, "tmp_dir": lockroot / "csv", "min_age": "0s"}
    with pytest.raises(ConfirmationNeeded, match="pass yes=True"):
        gc_cache(lockroot, **args)
    dry = gc_cache(lockroot, **args, dry_run=True)
    assert [i.path for i in dry.plan.items] == [lock] and dry.result is None
    declined = gc_cache(lockroot, **args, confirm=lambda plan: False)
    assert declined.declined and declined.result is None and lock.exists()
    done = gc_cache(lockroot, **args, confirm=lambda plan: True)
    assert done.result is not None and [o.item.path for o in done.result.removed] == [lock]
    assert not lock.exists() and done.exit_code == 0


def test_a_unit_of_more_files_than_the_open_file_limit_is_evicted(tmp_path: Path) -> None:
    """All shards of one fingerprint go together, even 300 of them under a limit of 64 open files."""
    import pyarrow as pa

    folder = tmp_path / "cache" / "csv" / "default-x" / "0.0.0" / ("a" * 64)
    folder.mkdir(parents=True)
    fp = "abcdef0123456789"
    table = pa.table({"x": [1, 2, 3]})
    for rank in range(300):
        meta = {"huggingface": json.dumps({"fingerprint": f"{fp}_{rank:05d}_of_00300"})}
        with (
            pa.OSFile(str(folder / f"cache-{fp}_{rank:05d}_of_00300.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema.with_metadata(meta)) as w,
        ):
            w.write_table(table)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
        "from cachetool.cli.app import main\n"
        "sys.argv = ['cachetool'] + sys.argv[1:]\n"
        "main()\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "gc",
            fp,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--min-age",
            "0",
            "-y",
            "--json",
        ],
        env=hf_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["result"]["freed_files"] == 300 and doc["result"]["failed"] == []
    assert list(folder.glob("cache-*")) == []


@pytest.mark.slow
def test_gc_naming_a_saved_dataset_that_is_the_cache_root_says_it_is_kept(tmp_path: Path) -> None:
    """`gc <fp> --cache-dir <a save_to_disk folder>` naming the saved Dataset (or a split of the
    saved DatasetDict given as the root) keeps it, since gc never removes the folder it cleans, and
    says so as for any named entry it keeps: `Error: <fp> was named but kept: <why>`, exit 1 (a dry
    run warns). It said "Nothing to remove" and exited 0, also with --include-sources; and so did
    gc of the parent folder naming the saved Dataset by the fingerprint `load_from_disk` gives it."""
    from datasets import Dataset, DatasetDict

    ds = Dataset.from_dict({"x": list(range(20))})
    one, saved = tmp_path / "one", tmp_path / "saved"
    Dataset.from_dict({"y": list(range(9))}).save_to_disk(str(one))
    DatasetDict(train=ds, test=ds.select(range(5))).save_to_disk(str(saved))
    cases = [
        (one, json.loads((one / "state.json").read_text())["_fingerprint"]),
        (saved, json.loads((saved / "test" / "state.json").read_text())["_fingerprint"]),
    ]
    for root, fp in cases:
        for extra in ([], ["--include-sources"]):
            said = cli("gc", fp, "--cache-dir", str(root), "-y", *extra)
            assert said.exit_code == 1, (root, extra, said.stdout, said.stderr)
            assert f"Error: {fp} was named but kept: " in said.stderr, said.stderr
            assert "is the cache root itself" in said.stderr, said.stderr
        dry = cli("gc", fp, "--cache-dir", str(root), "--dry-run")
        assert dry.exit_code == 0 and f"Warning: {fp} would be kept: " in dry.stderr, dry.stderr
        assert (root / "state.json").exists() or (root / "dataset_dict.json").exists()

    (alias,) = json.loads(cli("show", str(one), "--cache-dir", str(tmp_path), "--json").stdout)["aliases"]
    said = cli("gc", alias, "--cache-dir", str(tmp_path), "-y")
    assert said.exit_code == 1, (said.stdout, said.stderr)
    assert "was named but kept: source split or saved dataset (pass --include-sources)" in said.stderr
    assert (one / "state.json").exists()


@pytest.mark.slow
def test_gc_says_it_keeps_the_saved_dataset_that_is_the_cache_root(tmp_path: Path) -> None:
    """`gc --older-than` or `--max-size` with `--cache-dir` a save_to_disk folder (a Dataset or a
    DatasetDict) keeps the saved dataset, since gc never removes the folder it cleans, and its
    keeps sentence says so; it called the DatasetDict's split folders "unreadable or not
    evictable"."""
    from datasets import Dataset, DatasetDict

    ds = Dataset.from_dict({"x": list(range(20))})
    one, saved = tmp_path / "one", tmp_path / "saved"
    ds.save_to_disk(str(one))
    DatasetDict(train=ds, test=ds.select(range(5))).save_to_disk(str(saved))
    for root, n in ((one, 1), (saved, 2)):
        for how in (["--older-than", "0d"], ["--max-size", "0", "--include-sources"]):
            said = cli("gc", *how, "--min-age", "0", "--dry-run", "--cache-dir", str(root))
            assert said.exit_code == 0, said.stderr
            assert f": {n} in the saved dataset that is the cache root" in said.stdout, said.stdout
            doc = json.loads(cli("gc", *how, "--dry-run", "--json", "--cache-dir", str(root)).stdout)
            kept = doc["plan"]["kept"]
            assert kept["reasons"] == {"in the saved dataset that is the cache root": n}, kept


@pytest.mark.slow
def test_ctrl_c_at_the_confirmation_exits_130_and_removes_nothing(tmp_path: Path) -> None:
    """Ctrl-C while gc waits at its question ("Remove 2 item(s), …? [y/N]") on a terminal ends it
    as any interrupted command ends: `Error: interrupted` and exit 130 (not Click's "Aborted!" and
    1, which scripts take for "problems found"); nothing is removed."""
    import pty
    import select

    from tests.attack.races import synthesize_cache
    from tests.test_forks import _asleep

    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    master, slave = pty.openpty()
    # Started as from a terminal, SIGINT not ignored (a suite run as a background job of a
    # non-interactive shell ignores it, and the child would inherit that).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cachetool",
                "gc",
                "--max-size",
                "0",
                "--min-age",
                "0",
                "--cache-dir",
                str(root),
            ],
            env={**hf_env(tmp_path), "COLUMNS": "100"},
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        seen = b""
        while b"[y/N]" not in seen:
            assert select.select([proc.stdout], [], [], 120)[0], seen
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, seen
            seen += chunk
        _asleep(proc.pid)  # in the read of the answer
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        signal.signal(signal.SIGINT, before)
        os.close(master)
        os.close(slave)
    assert (proc.returncode, err.decode().strip().splitlines()[-1]) == (130, "Error: interrupted")
    assert len(list(root.rglob("cache-*.arrow"))) == 2


@pytest.mark.slow
def test_a_leftover_with_a_future_mtime_is_removable_with_min_age_0(
    copy: Path, leftovers: dict[str, Any]
) -> None:
    """A killed writer's tmp file whose mtime lies 3 hours in the future (another host's clock, or
    skew): `--min-age 1h` keeps it and says its mtime is in the future; `--min-age 0` plans it
    (still proven dead), the plan says its mtime is in the future, and `-y` removes it."""
    (rel,) = leftovers["leftovers"]["killed_map"]
    tmp_file = copy / rel
    future = time.time() + 3 * 3600 + 60
    os.utime(tmp_file, (future, future))
    args = ("--temp", "--tmp-dir", str(copy / "tmp"))
    code, doc = gc_json(copy, *args, "--min-age", "1h", "--dry-run")
    (kept,) = [s for s in doc["plan"]["skipped"] if s["path"] == str(tmp_file)]
    assert kept["reason"] == "modified 3h in the future (another host's clock?), younger than --min-age 1h"
    code, doc = gc_json(copy, *args, "--min-age", "0", "--dry-run")
    (item,) = [i for i in doc["plan"]["items"] if i["path"] == str(tmp_file)]
    assert (
        item["reason"]
        == "partial tmp file of a killed writer; modified 3h in the future (another host's clock?)"
    )
    code, doc = gc_json(copy, *args, "--min-age", "0", "-y")
    assert code == 0 and str(tmp_file) in {r["path"] for r in doc["result"]["removed"]}
    assert not tmp_file.exists()


COSTLY = """\
import json, sys, time
import cachetool
cachetool.install_tracing()
from datasets import load_dataset

def costly(ex):                          # 15 ms of CPU a row, a small result
    t = time.process_time()
    while time.process_time() - t < 0.015:
        pass
    return {"y": ex["id"] + 1}

def cheap(ex):                           # no time at all, a large result
    return {"pad": "x" * 20_000}

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
fps = [ds.map(costly)._fingerprint]      # least recently used
time.sleep(0.05)
fps.append(ds.map(cheap)._fingerprint)
cachetool.trace.install.uninstall_tracing()
time.sleep(0.05)
fps.append(ds.map(lambda ex: {"z": ex["id"]})._fingerprint)   # untraced: its cost is not known
print(json.dumps(fps))
"""


@pytest.mark.slow
def test_max_size_policy_cost_evicts_the_least_recompute_seconds_per_gb_first(tmp_path: Path) -> None:
    """At the same --max-size, LRU evicts the oldest entry, which took 0.3 s to compute; `--policy
    cost` keeps it and evicts the large entry that costs nothing to recompute, after the one whose
    cost was never recorded. The plan says what each eviction costs to recompute ("unknown" when
    never recorded); a bad policy is a usage error."""
    base = short_tmp_dir(tmp_path)
    (base / "d.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    (base / "costly.py").write_text(COSTLY, encoding="utf-8")
    env = hf_env(base, HF_DATASETS_CACHE=str(base / "cache"))
    proc = forks.run(  # forked warm: the maps' fingerprints do not depend on the hash seed
        [sys.executable, str(base / "costly.py"), str(base / "d.csv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preload=forks.PIPELINE,
    )
    assert proc.returncode == 0, proc.stderr
    costly, cheap, untraced = json.loads(proc.stdout.strip().splitlines()[-1])
    from cachetool.cache.scan import scan_cache

    entries = {e.fingerprint: e for e in scan_cache(base / "cache").entries}
    total = scan_cache(base / "cache").size
    limit = str(total - entries[cheap].size)
    lru = gc_json(base, "--max-size", limit, "--min-age", "0", "--dry-run")[1]["plan"]["items"]
    assert [i["fingerprint"] for i in lru] == [costly, cheap]
    code, doc = gc_json(base, "--max-size", limit, "--policy", "cost", "--min-age", "0", "--dry-run")
    items = {i["fingerprint"]: i for i in doc["plan"]["items"]}
    assert code == 0 and list(items) == [untraced, cheap], items
    assert doc["options"]["policy"] == "cost"
    assert items[untraced]["recompute_seconds"] is None and 0 <= items[cheap]["recompute_seconds"] < 0.3
    assert lru[0]["recompute_seconds"] >= 0.3
    human = cli(
        "gc",
        "--cache-dir",
        str(base / "cache"),
        "--max-size",
        limit,
        "--policy",
        "cost",
        "--min-age",
        "0",
        "-n",
    )
    assert "recompute" in human.stdout and "unknown" in human.stdout, human.stdout
    bad = cli("gc", "--cache-dir", str(base / "cache"), "--max-size", limit, "--policy", "fifo")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error:") and "cost or lru" in bad.stderr, bad.stderr


def test_policy_cost_loses_30_percent_fewer_recompute_seconds_than_lru_on_a_replayed_trace() -> None:
    """On the benchmark's replayed trace (500 steps of pipelines used in phases, sizes and compute
    times with a spread, a size limit below the working set), gc's planner with `--policy cost`
    loses at least 30% fewer recompute-seconds than with LRU at the same limit, over ten seeds."""
    from benchmarks.bench_gc_policy import make_trace, replay

    lost = {"lru": 0.0, "cost": 0.0}
    for seed in range(10):
        results, trace = make_trace(seed)
        limit = int(0.2 * sum(s.size for s in results))
        for policy in lost:
            lost[policy] += replay(trace, limit, policy, Path("/bench/cache"))[0]
    assert lost["cost"] <= 0.7 * lost["lru"], lost


@pytest.mark.slow
def test_gc_removes_the_step_lease_of_a_killed_once_leader_and_never_a_live_one(
    tmp_path: Path, isolated_env: Path
) -> None:
    """A `run --once` leader SIGKILLed in its map leaves its step lease
    (`.cachetool/once/<fp>.<n>.json`): `gc --dry-run` (evicting or `--temp`) lists it as dead and
    `gc --temp -y` removes it, as the once code judges it (pid and start time on this host). A
    live step lease of this host and an unexpired one of another host stay; `--break-lease`
    removes the latter."""
    from cachetool.cache.lease import read_lease
    from cachetool.processes import this_host
    from cachetool.trace.leases import claim_step, drop_step
    from cachetool.trace.once import once_dir
    from tests.test_once import _start, _work

    work = _work(tmp_path)
    (work / "block").touch()
    (work / "go").touch()
    (proc,) = _start(tmp_path, work, 1, once=True)
    deadline = time.monotonic() + 120
    started = work / "started"
    while not started.exists() or not started.read_text():
        assert proc.poll() is None, (tmp_path / "err-0.txt").read_text()[-3000:]
        assert time.monotonic() < deadline, "the leader never got into its map"
        time.sleep(0.02)
    os.kill(int(started.read_text()), signal.SIGKILL)
    proc.wait(timeout=60)
    root = tmp_path / "cache"
    folder = once_dir(root)
    (dead,) = folder.glob("*.json")
    assert read_lease(dead) is not None and read_lease(dead).pid == proc.pid  # type: ignore[union-attr]
    live = folder / f"{'cd' * 8}.0.json"
    assert claim_step(live, "cd" * 8)  # this process: alive
    me = this_host()
    other = folder / f"{'ef' * 8}.2.json"
    doc = {"v": 1, "host": "node-7", "boot_id": "another-boot", "pid": 4242, "pid_ns": me.pid_ns}
    other.write_text(json.dumps(doc | {"start": time.time() - 100, "renewed": time.time(), "lifetime": 60}))
    try:
        for mode in (["--temp"], ["--older-than", "3650d"]):
            code, doc = gc_json(tmp_path, *mode, "--dry-run")
            assert code == 0, doc
            states = {Path(x["path"]).name: x["state"] for x in doc["plan"]["leases"]}
            assert {n: states.get(n) for n in (dead.name, live.name, other.name)} == {
                dead.name: "dead",
                live.name: "live",
                other.name: "live",
            }, doc["plan"]["leases"]
        human = cli("gc", "--cache-dir", str(root), "--temp", "--dry-run").stdout
        assert f"step lease {dead.name} would be removed" in human, human
        assert dead.exists()
        code, doc = gc_json(tmp_path, "--temp", "-y")
        assert code == 0, doc
        removed = {Path(x["path"]) for x in doc["result"]["leases_removed"]}
        assert dead in removed and not dead.exists(), doc["result"]
        assert live.exists() and other.exists()
        broken = cli("gc", "--break-lease", other.stem, "--cache-dir", str(root))
        assert broken.exit_code == 0 and not other.exists(), broken.stdout + broken.stderr
    finally:
        drop_step(live)


@pytest.mark.slow
def test_a_kept_source_has_one_size_in_every_line_of_the_plan(copy: Path, leftovers: dict[str, Any]) -> None:
    """A source split kept by --keep (and its saved copy, of the same fingerprint) shows the same
    size in the Kept table, in the keeps sentence and in the JSON plan: its dataset_info.json
    counts on both sides (gc removes it with the split)."""
    folder = copy / leftovers["csv_dir"]
    args = (
        "--include-sources",
        "--max-size",
        "0",
        "--min-age",
        "0",
        "--keep",
        str(folder / "csv-train.arrow"),
    )
    _, doc = gc_json(copy, *args, "--dry-run")
    skips = {s["kind"]: s["size"] for s in doc["plan"]["skipped"]}
    assert set(skips) == {"source", "saved"}
    assert skips["source"] == sum(
        (folder / name).stat().st_size for name in ("csv-train.arrow", "dataset_info.json")
    )
    kept = doc["plan"]["kept"]
    assert (kept["entries"], kept["bytes"]) == (2, skips["source"] + skips["saved"])
    human = cli("gc", "--cache-dir", str(copy / "cache"), *args, "--dry-run").stdout
    from cachetool.formatting import human_size

    row = next(line for line in human.splitlines() if line.startswith("source"))
    assert human_size(skips["source"]) in row
    assert f"keeps 2 entries ({human_size(kept['bytes'])})" in human
