"""The cache package is the bottom of the model: what builds a listing imports nothing of the
lineage package, takes recorded lineage as an argument, and imports in any order."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cachetool.cache.scan import scan_cache
from tests.attack.races import synthesize_cache

PACKAGE = Path(__file__).resolve().parent.parent / "cachetool"
#: The modules that build a report. `scan` (which reads the ledger when asked to) and `lookup`
#: (which names an entry by the ledger's rule) are the only cache modules above the lineage.
BUILDERS = ("model", "walk", "recognize", "classify", "nondata", "entries", "index", "arrow", "layout")


def _runtime_imports(path: Path, top_level_only: bool = False) -> set[str]:
    """The cachetool modules a file imports when it runs (at the top or, unless
    `top_level_only`, inside a function; never what is under `if TYPE_CHECKING:`)."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            if not top_level_only:
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names if a.name.startswith("cachetool"))

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            module = node.module or ""
            if node.level == 0 and module.startswith("cachetool"):
                found.add(module)
                found.update(f"{module}.{a.name}" for a in node.names)

    Visitor().visit(ast.parse(path.read_text()))
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_modules_that_build_a_listing_never_import_the_lineage_package() -> None:
    """A listing gets recorded lineage as data (`usage=`), so the cache package never depends
    on the lineage package that depends on it."""
    offenders = {
        name: sorted(m for m in _runtime_imports(PACKAGE / "cache" / f"{name}.py") if ".lineage" in m)
        for name in BUILDERS
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_what_builds_a_listing_never_loads_the_lineage_package() -> None:
    """Following the module-level imports of the modules that build a report, transitively,
    never reaches cachetool.history (which imports the cache package): no import cycle can run
    through them."""
    files = [*PACKAGE.rglob("*.py")]
    modules = {_module_name(p): p for p in files}
    graph = {
        m: {d for d in _runtime_imports(p, top_level_only=True) if d in modules} for m, p in modules.items()
    }
    seen: set[str] = set()
    todo = [f"cachetool.cache.{name}" for name in BUILDERS]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    assert sorted(m for m in seen if m.startswith("cachetool.history")) == []


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
        "from cachetool.cache.scan import scan_cache, find_entry, CacheReport, Entry, CacheFile, DatasetDir\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@dataclass(frozen=True)
class _Use:
    last_used: float
    parent: str | None
    operation: str | None
    made_as: str | None = None


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
