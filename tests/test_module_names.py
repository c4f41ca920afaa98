"""Module names say what they hold and each name has one import path: no two modules of cachetool
share a name, and every `from cachetool.X import name` (in the package, its tests, benchmarks and
docs) names the module that defines `name`, never one that only imported it."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from cachetool import _LAZY
from cachetool.cli.common import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cachetool"
#: A definition at a module's top level: `def`, `class`, an assignment at column 0.
TOP_LEVEL = re.compile(r"^(?:async def|def|class) (\w+)|^(\w+(?:, *\w+)*) *(?::[^=\n]*)?=(?!=)", re.M)
#: `from cachetool.X import a, b` (or `import (\n a,\n b,\n)`) as written in code, in code strings
#: a test runs, in docstrings and in Markdown.
IMPORT = re.compile(
    r"\bfrom (cachetool(?:\.[a-z_][a-z0-9_]*)*) import (\([^)]*\)|\w+(?: as \w+)?(?:, *\w+(?: as \w+)?)*)"
)


def module_names() -> dict[str, list[str]]:
    """Each module and package name under cachetool/, with the paths that carry it."""
    names: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if path.name == "__init__.py":
            names[path.parent.name].append(f"{rel.parent}/")
        else:
            names[path.stem].append(str(rel))
    return names


def is_command_and_its_package(paths: list[str]) -> bool:
    """`cachetool/cli/gc.py` (the `gc` command) beside `cachetool/maintenance/gc/` (its model)."""
    commands = {f"cachetool/cli/{module}.py" for module, _, _ in COMMANDS.values()}
    modules = [p for p in paths if not p.endswith("/")]
    return len(paths) == 2 and len(modules) == 1 and modules[0] in commands


def test_no_two_modules_share_a_name() -> None:
    """A module name is used once in the package tree: `cachetool/cli/stats.py` is the `stats`
    command and what it counts lives in `history/ledger_stats.py`, not a second `stats.py`. The
    one exception is a cli/ command module named like the package the command is built on
    (`cli/gc.py` and `maintenance/gc/`), and only when nothing else carries that name."""
    clashes = {
        name: paths
        for name, paths in module_names().items()
        if len(paths) > 1 and not is_command_and_its_package(paths)
    }
    assert not clashes, "\n".join(f"{name}: {', '.join(paths)}" for name, paths in sorted(clashes.items()))


def module_of(path: Path) -> str:
    """`cachetool/cache/model.py` -> `cachetool.cache.model`."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_names(path: Path) -> set[str]:
    """What a module defines at column 0 (`def`, `class`, assignments): a cheap first look."""
    return {
        n.strip()
        for m in TOP_LEVEL.finditer(path.read_text(encoding="utf-8"))
        for n in (m[1] or m[2]).split(",")
    }


def defined_names(path: Path) -> set[str]:
    """The names a module defines at its top level, inside top-level `if`/`try` blocks too (its
    syntax tree), never the ones it imports."""
    names: set[str] = set()
    blocks: list[list[ast.stmt]] = [ast.parse(path.read_text(encoding="utf-8")).body]
    while blocks:
        for node in blocks.pop():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If):
                blocks += [node.body, node.orelse]
            elif isinstance(node, ast.Try):
                blocks += [node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)]
    return names


def imports_in(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of every `from cachetool... import name` in a file."""
    text = path.read_text(encoding="utf-8")
    for m in IMPORT.finditer(text):
        lineno = text.count("\n", 0, m.start()) + 1
        names = re.sub(r"#.*", "", m[2]).strip("()")
        yield from ((lineno, m[1], n.split()[0]) for n in names.split(",") if n.strip())


def test_each_name_is_imported_from_the_module_that_defines_it() -> None:
    """Importing `Entry` from `cachetool.cache.scan` would keep a second path to it alive (scan
    only imports it from `cachetool.cache.model`): every import names the module that defines the
    name, a submodule, or a public name of `cachetool` itself; and the module exists."""
    paths = {module_of(p): p for p in PACKAGE.rglob("*.py")}
    defined = {module: top_level_names(path) for module, path in paths.items()}
    defined["cachetool"] |= set(_LAZY)
    sources = [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
    ]
    second_paths = []
    for path in sorted(sources):
        for lineno, module, name in imports_in(path):
            if module not in defined:
                second_paths.append(f"{path.relative_to(ROOT)}:{lineno}: no module {module}")
            elif name in defined[module] or f"{module}.{name}" in defined:
                continue
            elif name not in defined_names(paths[module]):
                home = sorted(m for m, names in defined.items() if name in names and m != "cachetool")
                where = f"{path.relative_to(ROOT)}:{lineno}"
                second_paths.append(f"{where}: {name} from {module} (defined in {', '.join(home)})")
    assert not second_paths, "\n".join(second_paths)
