"""What one pass over `/proc` sees of a live process: its memory maps and its open files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
