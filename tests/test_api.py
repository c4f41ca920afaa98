"""The Python API: what `cachetool` exports, that each command has one function with the command's
options as keywords, and that every function the README, docs/ and CHANGELOG name is importable."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

import cachetool
from cachetool.cli.app import app
from cachetool.cli.docs import API_END, API_START

ROOT = Path(__file__).resolve().parents[1]

#: The function behind each command (`from cachetool import <name>`).
COMMAND_FUNCTIONS = {
    "ls": "list_cache",
    "show": "show_entry",
    "dirs": "resolve_dirs",
    "demo": "build_demo",
    "run": "run_script",
    "lineage": "lineage",
    "verify": "verify_cache",
    "gc": "gc_cache",
    "pin": "pin",
    "unpin": "unpin",
    "explain": "explain",
    "stats": "ledger_stats",
    "check-determinism": "check_determinism",
    "report": "write_report",
    "merge": "merge_documents",
    "remote": "cachetool.remote.transfer.push",
}

#: Options that choose how a result is shown (and the exit code it gives), or whether a plan is
#: carried out, not what the result is.
PRESENTATION = {"format", "json", "quiet", "truncate", "help", "top", "strict", "dry_run", "yes"}

#: What names the cache root: `--cache-dir` everywhere, and the PATH of `ls`.
ROOT_PARAMS = {("*", "cache_dir"), ("ls", "path")}

#: Options that make a command do another thing, with a function of its own.
OTHER_FUNCTION = {
    ("pin", "list"): "list_pins",
    ("stats", "zero"): "zero_stats",
    ("gc", "break_lease"): "break_lease",
    ("verify", "list"): "quarantined",
    ("remote", "action"): "cachetool.remote.transfer.pull",
    ("remote", "saved"): "cachetool.remote.saved.push_saved",
    ("remote", "to"): "cachetool.remote.saved.pull_saved",
    ("remote", "yes"): "cachetool.remote.saved.pull_saved",
}

#: Arguments whose keyword is shorter than the name the help shows (`[SCRIPT_ARGS]...`).
KEYWORD_OF = {("check-determinism", "script_args"): "args"}


def _commands() -> dict[str, Any]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


def _keyword(param: Any) -> str:
    """The Python keyword of a CLI parameter: an argument's name; an option's long name in
    snake case, `--no-X` being `X` (`--no-verify` is `verify=False`)."""
    if isinstance(param, typer.core.TyperArgument):
        return param.name or ""
    flag = next(o for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))[2:]
    return flag.removeprefix("no-").replace("-", "_")


def test_import_cachetool_is_cheap_and_every_exported_name_resolves() -> None:
    """`import cachetool` (and `cachetool.fingerprint`) loads no pyarrow, dill, xxhash or
    datasets: names load when first used; then every name in `__all__` is there, documented."""
    code = (
        "import sys, cachetool, cachetool.fingerprint\n"
        "heavy = ('pyarrow', 'dill', 'xxhash', 'datasets', 'typer', 'rich')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""
    assert set(cachetool.__all__) <= set(dir(cachetool))
    for name in cachetool.__all__:
        obj = getattr(cachetool, name)
        assert name == "__version__" or (obj.__doc__ or "").strip(), f"cachetool.{name} has no docstring"
    with pytest.raises(AttributeError):
        cachetool.no_such_name  # noqa: B018


def test_every_command_has_an_exported_function() -> None:
    """Each command is in COMMAND_FUNCTIONS, and its function is `from cachetool import ...`-able
    (`from cachetool import lineage` is the function, not a package)."""
    assert set(_commands()) == set(COMMAND_FUNCTIONS)
    functions = [*COMMAND_FUNCTIONS.values(), *OTHER_FUNCTION.values()]
    assert {n for n in functions if "." not in n} <= set(cachetool.__all__)
    for dotted in (n for n in functions if "." in n):
        assert (_resolve(dotted).__doc__ or "").strip(), dotted


@pytest.mark.parametrize("command", sorted(COMMAND_FUNCTIONS))
def test_command_options_are_the_function_keywords(command: str) -> None:
    """`cachetool CMD --some-option` is `cachetool.cmd_function(..., some_option=...)`: every
    argument and option of the command (but the output format ones) is a parameter of its
    function, with the same name; `--cache-dir` (the root) is the function's first parameter."""
    name = COMMAND_FUNCTIONS[command]
    func = _resolve(name) if "." in name else getattr(cachetool, name)
    names = list(inspect.signature(func).parameters)
    params = {n.rstrip("_") for n in names}
    missing = []
    for param in _commands()[command].params:
        keyword = KEYWORD_OF.get((command, _keyword(param)), _keyword(param))
        if keyword in PRESENTATION or {("*", keyword), (command, keyword)} & ROOT_PARAMS:
            continue
        if (command, keyword) in OTHER_FUNCTION:  # `pin --list` is `list_pins(root)`
            continue
        if keyword not in params:
            missing.append(keyword)
    assert not missing, f"{COMMAND_FUNCTIONS[command]}{inspect.signature(func)} lacks {missing}"


def test_explain_and_check_determinism_refuse_in_python_what_their_commands_refuse(tmp_path: Path) -> None:
    """`explain(history=-1)` and `check_determinism(timeout=-1)` raise the `CachetoolError` their
    commands exit 2 with, before anything is read or run: the options validate themselves."""
    from cachetool.errors import CachetoolError

    with pytest.raises(CachetoolError, match="invalid --history -1"):
        cachetool.explain(tmp_path, "7a57", history=-1)
    with pytest.raises(CachetoolError, match="either a fingerprint or --last"):
        cachetool.explain(tmp_path, "7a57", last=True)
    script = tmp_path / "p.py"
    script.write_text("")
    with pytest.raises(CachetoolError, match="invalid --timeout"):
        cachetool.check_determinism(script, timeout=-1.0)
    with pytest.raises(CachetoolError, match="--hash-seeds"):
        cachetool.check_determinism(script, hash_seeds=[5, 5])


# -- every documented name is importable -------------------------------------------------------

#: Functions the docs name that are not cachetool's (`datasets`, the standard library, Linux).
NOT_OURS = {
    "disable_caching",
    "load_dataset",
    "map",
    "select",
    "shuffle",
    "read",
    "statfs",
    "renameat2",
    "from_generator",
    "sorted",
}

#: Names the CHANGELOG says were removed (or moved to another layer): they must stay gone.
GONE = {
    "cachetool.trace.hooks",
    "cachetool.trace.settings",
    "cachetool.maintenance.hints",
    "cachetool.maintenance.leases",
    "cachetool.maintenance.pins",
    "cachetool.maintenance.locks",
    "cachetool.maintenance.gc.options",
    "cachetool.maintenance.gc.planner",
    "cachetool.maintenance.gc.planner.build_plan",
    "cachetool.history.roots",
    "cachetool.history.ledger.resolve",
    "cachetool.history.ledger.usage_by_fingerprint",
    "cachetool.history.resolve.resolve",
    "cachetool.history.segments",
    "cachetool.history.narrow.narrow_report",
    "cachetool.history.usage",
    "cachetool.history.show",
    "cachetool.history.query",
    "cachetool.history.query.lineage_view",
    "cachetool.history.ledger.LedgerView",
    "cachetool.cache.lean",
    "cachetool.cache.snapshot",
    "cachetool.cache.listing.list_cache_lean",
    "cachetool.cache.listing",
    "cachetool.cache.listing.read_listing",
    "cachetool.cache.query.is_pinned",
    "cachetool.history.explain.stale_hits",
    "cachetool.report.report",
    "cachetool.cli.completions",
    "cachetool.cli.tables",
    "cachetool.determinism.events.read_events",
    "cachetool.fingerprint.decompose",
    "cachetool.cache.ipc_headers",
    "cachetool.cache.model.ENTRY_JSON_KEYS",
    "cachetool.cache.recognize",
    "cachetool.cache.store.connect_image",
    "cachetool.cli.ls_table",
    "cachetool.cli.light",
    "cachetool.determinism.events",
    "cachetool.history.explain.source_text",
    "cachetool.maintenance.verify.checks",
    "cachetool.trace.roots",
    "cachetool.remote.push",
    "cachetool.remote.pull",
    "cachetool.remote.hook",
    "cachetool.remote.record",
    "cachetool.determinism.render",
    "cachetool.history.explain.view",
    "cachetool.report.data.ReportData.tiles",
    "cachetool.report.html.write_page",
    "cachetool.cache.dirs",
    "cachetool.cache.dirs.derived_dir",
    "cachetool.cache.dirs.root_for",
    "cachetool.cache.query",
    "cachetool.cache.query.apply_filters",
    "cachetool.demo",
    "cachetool.demo.build_demo",
    "cachetool.determinism.report",
    "cachetool.history.stats",
    "cachetool.remote.fleet",
    "cachetool.remote.fleet.verify_remote",
    "cachetool.remote.once",
    "cachetool.trace.records",
}


def _resolve(dotted: str) -> Any:
    """`cachetool.a.b.name` as an object: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _pages() -> dict[str, str]:
    """README, CHANGELOG and docs/, the generated part of docs/api.md left out (it is generated
    from what exists)."""
    pages = {p.relative_to(ROOT).as_posix(): p for p in [ROOT / "README.md", ROOT / "CHANGELOG.md"]}
    pages.update({f"docs/{p.name}": p for p in sorted((ROOT / "docs").glob("*.md"))})
    texts = {}
    for name, path in pages.items():
        text = path.read_text(encoding="utf-8")
        if API_START in text:
            text = text.split(API_START)[0] + text.split(API_END)[-1]
        texts[name] = text
    return texts


def _sections(text: str) -> list[str]:
    """The text between Markdown headings (a `#` line inside a code block is no heading)."""
    sections: list[str] = [""]
    fenced = False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if line.startswith("#") and not fenced:
            sections.append("")
        sections[-1] += line + "\n"
    return sections


def _documented() -> tuple[set[str], dict[str, set[str]]]:
    """Dotted names (`cachetool.X.y`, `from cachetool.X import y`), and each bare function name
    written as a call in backticks with the modules named in its section (between headings)."""
    dotted: set[str] = set()
    bare: dict[str, set[str]] = {}
    for text in _pages().values():
        for section in _sections(text):
            modules = {"cachetool"}
            for m in re.finditer(r"from (cachetool[\w.]*) import ([\w, ]+)", section):
                modules.add(m.group(1))
                dotted.update(f"{m.group(1)}.{n.strip()}" for n in m.group(2).split(",") if n.strip())
            for name in re.findall(r"(?<![\w/.])(cachetool(?:\.\w+)+)", section):
                dotted.add(name)
                modules.add(name)
            for name in re.findall(r"`([a-z_][a-z0-9_]*)\(", section):
                bare.setdefault(name, set()).update(modules)
    return dotted, bare


def test_every_dotted_name_in_the_docs_resolves() -> None:
    """`from cachetool.X import y` and `cachetool.X.y` written in README, docs/ and CHANGELOG work,
    but the ones the CHANGELOG says are gone (GONE), which stay gone."""
    dotted, _ = _documented()
    assert "cachetool.fingerprint.hash_object" in dotted or "cachetool.fingerprint" in dotted
    broken, found = [], []
    for name in sorted(dotted):
        try:
            _resolve(name)
            found.append(name)
        except (ImportError, AttributeError):
            broken.append(name)
    assert set(broken) == GONE and not GONE & set(found)


@pytest.mark.parametrize(
    "name",
    [n for n in sorted(_documented()[1]) if n not in NOT_OURS and not any(g.endswith(f".{n}") for g in GONE)],
)
def test_every_function_the_docs_name_is_importable(name: str) -> None:
    """A function the docs name as `name()` imports from `cachetool`, or from a module the same
    section names (`cachetool.fingerprint`: `hash_object()`)."""
    modules = _documented()[1][name]
    found = []
    for module in modules:
        try:
            found.append(_resolve(f"{module}.{name}"))
        except (ImportError, AttributeError):
            continue
    assert found, f"`{name}()` is not importable from any of {sorted(modules)}"


def test_python_api_reference_is_generated_from_the_docstrings() -> None:
    """docs/api.md is what `python -m cachetool.cli.docs docs/api.md` writes from the docstrings."""
    from cachetool.cli.docs import API_END, API_START, api_reference

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    block = text.split(API_START, 1)[1].split(API_END, 1)[0]
    assert block.strip() == api_reference().strip(), "run: python -m cachetool.cli.docs docs/api.md"
    assert "### `scan_cache(" in block and "### `verify_cache(" in block and "### `plan_gc(" in block


@pytest.mark.parametrize(
    "dotted",
    [
        "cachetool.VerifyOptions",
        "cachetool.GcOptions",
        "cachetool.history.explain.explainer.ExplainOptions",
        "cachetool.determinism.check.CheckOptions",
    ],
)
def test_api_reference_says_what_each_option_of_an_options_class_does(dotted: str) -> None:
    """The functions' docstrings send the reader to these classes for their keywords, so each
    field's section row has its type, default and meaning (the option's help, one declaration)."""
    import dataclasses

    from cachetool.cli.docs import api_reference

    module, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    section = api_reference().split(f"### `{name}`\n", 1)[1].split("\n### ", 1)[0]
    for f in dataclasses.fields(cls):
        row = next((line for line in section.splitlines() if line.startswith(f"| `{f.name}` ")), "")
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 4 and all(cells), f"{name}.{f.name}: {row or 'no row'}"
        meaning = " ".join((f.metadata.get("help") or f.metadata["doc"]).split())
        assert cells[3] == meaning.replace("<", "&lt;"), f"{name}.{f.name}"


def test_python_reference_keeps_what_the_old_docstrings_said_of_some_options(tmp_path: Path) -> None:
    """What `verify_cache` and `check_determinism` once said of these keywords themselves."""
    from cachetool.cli.docs import api_reference

    text = api_reference()
    assert "shard: str | tuple[int, int] | Shard | None = None" in text
    assert "default: one per core" in text and "SIGBUS" in text
    assert "the files the cache holds are left alone" in text
    assert cachetool.verify_cache(tmp_path, shard=(1, 2)).to_json()["shard"] == {"index": 1, "count": 2}
