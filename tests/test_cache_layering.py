"""The layers hold (docs/architecture.md): no module imports from a layer above its own, the cache
package takes recorded lineage as an argument, and the cache and ledger modules import in any
order."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cachetool.cache.scan import scan_cache
from tests.attack.races import synthesize_cache

ROOT = Path(__file__).resolve().parent.parent


def test_imports_keep_the_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """No module imports from a layer above its own, deferred imports included, and no packages
    or modules import each other in a circle: the contracts of pyproject.toml hold."""
    cli = pytest.importorskip("importlinter.cli")  # in the `test` extra
    monkeypatch.chdir(ROOT)
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "first",
    ["cachetool.history.ledger", "cachetool.cache.scan", "cachetool.cache.lookup", "cachetool.cache.model"],
)
def test_cache_and_ledger_modules_import_in_any_order(first: str) -> None:
    """A fresh interpreter imports the scan, the lookup, the model and the ledger whichever comes
    first (an import cycle fails in one of the orders)."""
    others = [
        "cachetool.cache.model",
        "cachetool.cache.lookup",
        "cachetool.cache.scan",
        "cachetool.history.ledger",
    ]
    code = f"import {first}\n" + "".join(f"import {m}\n" for m in others if m != first)
    code += (
        "from cachetool.cache.scan import scan_cache\n"
        "from cachetool.cache.lookup import find_entry\n"
        "from cachetool.cache.model import CacheReport, Entry, CacheFile, DatasetDir\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@dataclass(frozen=True)
class _Use:
    last_used: float
    parent: str | None
    operation: str | None
    made_as: str | None = None
    saves: tuple[tuple[str, float], ...] = ()


def test_recorded_lineage_given_as_an_argument_is_attached_by_fingerprint(tmp_path: Path) -> None:
    """`scan_cache(root, usage=...)` attaches parent, operation and last use from the mapping it
    is given (no ledger is read), to the entry of that fingerprint only."""
    root = tmp_path / "cache"
    files = synthesize_cache(root, 2)
    fps = [p.name[len("cache-") : -len(".arrow")] for p in files]
    report = scan_cache(root, usage={fps[0]: _Use(4_000_000_000.0, "p4r3nt", "map")})
    first, second = report.find(fps[0]), report.find(fps[1])
    assert (first.parent, first.operation, first.used) == ("p4r3nt", "map", 4_000_000_000.0)
    assert (second.parent, second.operation) == (None, None)
    assert second.used == second.modified
