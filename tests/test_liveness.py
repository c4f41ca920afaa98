"""What one pass over `/proc` sees of a live process: its memory maps and its open files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.maintenance.liveness import pids_holding, scan_in_use

_HOLDER = (
    "import mmap, sys, time\n"
    "mapped = open(sys.argv[1], 'rb')\n"
    "m = mmap.mmap(mapped.fileno(), 0, access=mmap.ACCESS_READ)\n"
    "mapped.close()\n"  # held by the mapping alone
    "held = open(sys.argv[2], 'rb')\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_mapped_file_and_an_open_file_are_seen_by_inode_and_name(tmp_path: Path) -> None:
    """A file a live process only maps (its descriptor closed), named with spaces, and a file it
    holds open are both seen: by device and inode (what gc's last check asks) and by name."""
    mapped, held = tmp_path / "a mapped  file.arrow", tmp_path / "held.arrow"
    mapped.write_bytes(b"x" * 8192)
    held.write_bytes(b"y")
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(mapped), str(held)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        now = scan_in_use(writers=False)
        for path in (mapped, held):
            st = os.stat(path)
            assert proc.pid in now.pids(st), path
            assert proc.pid in now.pids_for_path(os.path.realpath(path)), path
        st = os.stat(mapped)
        assert proc.pid in now.maps[(st.st_dev, st.st_ino)]
        keys = {(s.st_dev, s.st_ino) for s in map(os.stat, (mapped, held))}
        assert {k: proc.pid in pids for k, pids in pids_holding(keys).items()} == dict.fromkeys(keys, True)
    finally:
        proc.kill()
        proc.wait()


def _kernel_thread() -> int | None:
    """A kernel thread this process sees in /proc (PF_KTHREAD in its flags), if any."""
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[6]) & 0x00200000:
                return int(name)
    return None


def test_a_process_whose_memory_is_gone_owns_no_temp_folder(tmp_path: Path) -> None:
    """A Python process that a liveness snapshot saw and that is ending when gc reads its
    environment (its memory gone, /proc still showing it running: the read fails with ESRCH)
    makes and uses no folder: it is no user of the temp dir. It counted as one that may own every
    `pymp-*` and `hf_datasets-*` folder of any temp dir, so `gc --temp` now and then kept a dead
    pool's folder on a busy machine. A kernel thread reads the same way (no memory, running) and
    stands for the ending process, which no test can hold in that state."""
    from cachetool.maintenance.liveness import InUse, temp_dir_users

    kthread = _kernel_thread()
    if kthread is None:
        pytest.skip("no kernel thread visible here (a pid namespace of its own)")
    with pytest.raises(ProcessLookupError):
        Path(f"/proc/{kthread}/environ").read_bytes()
    seen = InUse(programs={kthread: (True, True)})  # as read while it ran Python with pyarrow
    assert temp_dir_users(tmp_path, seen) == ()
