"""A cache on a file system other hosts share: detection, gc's `--min-age` floor, `dirs`, and
the lease rules every host applies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachetool.cache.fstype import file_system, is_shared_type, mount_of
from cachetool.cache.lease import Lease, lease_state
from cachetool.processes import process_start, this_host
from tests.conftest import hf_env

# Mount-table lines as they appear on real machines (one per file system family).
MOUNTS = """\
/dev/nvme0n1p2 / ext4 rw,relatime 0 0
tmpfs /tmp tmpfs rw,nosuid,nodev 0 0
overlay /var/lib/docker/overlay2/x/merged overlay rw,relatime,lowerdir=/a,upperdir=/b,workdir=/c 0 0
10.0.0.5:/export/hf /mnt/hf nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,hard,proto=tcp 0 0
nas:/vol/old /mnt/old nfs rw,relatime,vers=3,hard,proto=tcp,mountproto=udp 0 0
192.168.1.10@tcp:/lustre /lustre lustre rw,flock,lazystatfs 0 0
gpfs1 /gpfs/fs1 gpfs rw,relatime 0 0
10.0.0.1:6789:/ /mnt/cephfs ceph rw,relatime,name=admin,secret=<hidden>,acl 0 0
//server/share /mnt/share cifs rw,relatime,vers=3.1.1,cache=strict,uid=0 0 0
me@login:/data /home/me/remote fuse.sshfs rw,nosuid,nodev,relatime,user_id=1000,group_id=1000 0 0
/dev/sdb1 /media/usb fuseblk rw,nosuid,nodev,relatime,user_id=0,group_id=0 0 0
srv:/exp /mnt/my\\040data nfs4 rw,relatime 0 0
"""


@pytest.mark.parametrize(
    ("path", "fstype", "shared"),
    [
        ("/home/me/.cache/huggingface/datasets", "ext4", False),
        ("/tmp/hf", "tmpfs", False),
        ("/var/lib/docker/overlay2/x/merged/root/.cache", "overlay", False),
        ("/mnt/hf/datasets", "nfs4", True),
        ("/mnt/hf", "nfs4", True),
        ("/mnt/hf2/datasets", "ext4", False),  # a mount point is a whole path component
        ("/mnt/old/x", "nfs", True),
        ("/lustre/project/cache", "lustre", True),
        ("/gpfs/fs1/u/cache", "gpfs", True),
        ("/mnt/cephfs/hf", "ceph", True),
        ("/mnt/share/hf", "cifs", True),
        ("/home/me/remote/hf", "fuse.sshfs", True),
        ("/media/usb/hf", "fuseblk", False),  # a local disk through FUSE
        ("/mnt/my data/hf", "nfs4", True),  # \040 is a space
    ],
)
def test_the_mount_table_names_the_file_system_and_whether_hosts_share_it(
    path: str, fstype: str, shared: bool
) -> None:
    """The longest mount point above a cache root names its file system; NFS, Lustre, GPFS,
    CephFS, CIFS and FUSE ones are shared, local disks, tmpfs and overlays are not."""
    hit = mount_of(path, MOUNTS)
    assert hit is not None and hit[1] == fstype
    assert is_shared_type(hit[1]) is shared


def test_this_machines_own_mount_table() -> None:
    """The test machine's root file system is read from its real /proc/self/mounts and statfs."""
    fs = file_system("/")
    assert fs.mount_point == "/" and fs.magic is not None
    assert fs.shared is is_shared_type(fs.type)


def test_lease_rules_local_by_proc_other_hosts_by_expiry(tmp_path: Path) -> None:
    """A lease of this host and PID namespace lives exactly as long as its process (same pid and
    start time); a lease from anywhere else lives until its last renewal plus its lifetime."""
    me = this_host()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_start(proc.pid)
        assert started is not None
        now = time.time()
        local = Lease(tmp_path / "a.json", me.host, me.boot_id, proc.pid, me.pid_ns, started, now - 600, 60)
        assert lease_state(local, me) == "live"  # not renewed for 10 min, but its process runs
        reused = Lease(local.path, me.host, me.boot_id, proc.pid, me.pid_ns, started - 50, now, 60)
        assert lease_state(reused, me) == "dead"  # same pid, another process
        other_ns = Lease(local.path, "node-7", me.boot_id, 12345, me.pid_ns + 1, now - 5, now - 30, 60)
        assert lease_state(other_ns, me, now) == "live"
        assert lease_state(other_ns, me, now + 31) == "expired"
    finally:
        proc.kill()
        proc.wait()
    assert lease_state(local, me) == "dead"


@pytest.mark.slow
def test_gc_on_a_real_fuse_mount_says_so_and_keeps_the_min_age_floor(tmp_path: Path) -> None:
    """A cache reached through a real FUSE mount (bindfs, in a private mount namespace): `dirs`
    shows `fuse (shared)`; `gc --temp --min-age 0` is refused (exit 2, one line naming the floor
    and the override); `--min-age 10m` and `--other-hosts-idle` are accepted, and the plan names
    the file system."""
    if shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs bindfs and /dev/fuse (apt-get install bindfs)")
    src, mnt, out = tmp_path / "src", tmp_path / "mnt", tmp_path / "out"
    for d in (src / "cache", mnt, out, tmp_path / "tmp"):
        d.mkdir(parents=True)
    (tmp_path / "data.csv").write_text("id,text\n" + "\n".join(f"{i},r{i}" for i in range(20)) + "\n")
    code = "import sys, datasets; datasets.load_dataset('csv', data_files=sys.argv[1], split='train')"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "data.csv")], env=hf_env(src), check=True)
    ct = str(Path(sys.executable).with_name("cachetool"))
    root = mnt / "cache"
    gc = f"{ct} gc --cache-dir {root} --temp --tmp-dir {tmp_path / 'tmp'} --json"
    script = f"""
        bindfs {src} {mnt} || exit 9
        trap 'umount {mnt} 2>/dev/null || fusermount3 -u {mnt} 2>/dev/null || fusermount -u {mnt}' EXIT
        rc=0; {gc} --min-age 0 -y > {out}/refused.json 2> {out}/refused.err || rc=$?
        echo $rc > {out}/refused.rc
        {gc} --min-age 10m --dry-run > {out}/floor.json
        {gc} --min-age 0 --other-hosts-idle -y > {out}/idle.json
        {ct} dirs --cache-dir {root} --json > {out}/dirs.json
    """
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    cmd = ["unshare", *user, "--mount", "sh", "-ec", script]
    subprocess.run(cmd, env=hf_env(src), check=True, timeout=300)
    assert not _bindfs_left(mnt), "the bindfs mount outlived the test"
    assert (out / "refused.rc").read_text().strip() == "2"
    err = (out / "refused.err").read_text().strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"Error: {root} is on fuse (a file system other hosts may write)")
    assert "below the 10 min floor" in err[0] and "--other-hosts-idle" in err[0]
    floor = json.loads((out / "floor.json").read_text())["plan"]
    assert floor["filesystem"]["type"] == "fuse" and floor["filesystem"]["shared"] is True
    idle = json.loads((out / "idle.json").read_text())
    assert idle["options"]["other_hosts_idle"] is True and idle["result"]["failed"] == []
    cache_row = json.loads((out / "dirs.json").read_text())["locations"][0]
    assert (cache_row["filesystem"], cache_row["shared"]) == ("fuse", True)


def _bindfs_left(mnt: Path) -> list[int]:
    """Pids of bindfs processes still serving `mnt` (a mount left behind) after up to 5 s."""
    import psutil

    deadline = time.monotonic() + 5
    while True:
        left = []
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["name"] == "bindfs" and str(mnt) in cmdline:
                left.append(proc.pid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
