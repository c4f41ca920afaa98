"""gc against real processes that race it: nothing a live process maps is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.attack.races import mapped_files_survive_gc
from tests.conftest import hf_env

pytestmark = pytest.mark.slow


def test_a_file_mapped_while_gc_runs_is_never_deleted(tmp_path: Path) -> None:
    """A reader maps cache hits while `gc --max-size 1 -y` evicts 200 old entries: every file the
    reader holds is still on disk afterwards (gc checks liveness again after taking the file out of
    reach, and puts it back when it became live)."""
    env = hf_env(tmp_path)
    lost_rounds = []
    for round_ in range(3):
        held, lost = mapped_files_survive_gc(tmp_path / f"cache{round_}", 200, env)
        assert held, "the reader mapped nothing: the race did not happen"
        if lost:
            lost_rounds.append((len(held), len(lost)))
    assert lost_rounds == []


def test_a_real_pipeline_beside_a_gc_loop_never_fails(tmp_path: Path) -> None:
    """A `datasets` pipeline (csv load, map, filter, batched map) runs five times on one cache
    while `gc --max-size 1 --min-age 0 --include-sources -y` runs in a loop beside it: the pipeline
    never fails and gc never prints a traceback (`python -m tests.soak` runs it longer)."""
    from tests.soak import soak_pipeline

    assert soak_pipeline(5, tmp_path) == 0
