"""`cachetool demo`: a real cache built, listed and explained."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.slow
def test_demo_lists_the_cache_and_ends_with_the_lineage(traced_demo: dict[str, Any]) -> None:
    out = traced_demo["stdout"]
    assert "shards 2/2" in out and "Lineage of " in out
    lineage = out.split("Lineage of ", 1)[1]
    assert [line.split(".", 1)[1].split()[0] for line in lineage.splitlines()[1:7]] == [
        "load_dataset",
        "map",
        "filter",
        "shuffle",
        "flatten_indices",
        "map",
    ]
