"""cachetool: make the on-disk cache of Hugging Face `datasets` visible, trustworthy and tidy.

The Python API mirrors the command line; every command has a function behind it::

    from cachetool import scan_cache
    report = scan_cache("~/.cache/huggingface/datasets")
    for entry in report.entries:
        print(entry.kind, entry.fingerprint, entry.rows, entry.size_str)

Owns the public names (`_LAZY`: each lives in one module, imported when first used, so that
`import cachetool` stays cheap: no pyarrow, dill or `datasets`) and the base modules every layer
may import: `errors` (exceptions, exit codes), `formatting`, `safejson`, `processes`,
`annotations`, `hints`; they import no other part of cachetool but each other. Layers, top down
(import-linter checks them, deferred imports included): `cli` -> `determinism` | `report` |
`demo_cache` -> `maintenance` -> `trace` -> `history` -> `cache` -> `fingerprint` -> base modules.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` costs the launcher of `cachetool run` ~8 ms
    from typing import Any

__version__ = "0.1.0"

#: Every public name and the module it lives in. One function per command (the command's options
#: are its keywords: `--no-verify` is `verify=False`, `--cache-dir` its first argument), then the
#: types they return and take.
_LAZY = {
    # ls, show, dirs, demo
    "list_cache": "cachetool.cli.ls",
    "scan_cache": "cachetool.cache.scan",
    "find_entry": "cachetool.cache.lookup",
    "show_entry": "cachetool.history.lineage_view",
    "resolve_dirs": "cachetool.cache.locations",
    "resolve_cache_root": "cachetool.cache.locations",
    "build_demo": "cachetool.demo_cache",
    # run, lineage
    "run_script": "cachetool.trace.runner",
    "tracing": "cachetool.trace.install",
    "install_tracing": "cachetool.trace.install",
    "prepare_once": "cachetool.trace.install",
    "lineage": "cachetool.history.lineage_view",
    "load_graph": "cachetool.history.lineage_view",
    # verify
    "verify_cache": "cachetool.maintenance.verify",
    "VerifyOptions": "cachetool.maintenance.verify",
    "quarantined": "cachetool.maintenance.verify.quarantine",
    # gc, pin, unpin
    "gc_cache": "cachetool.maintenance.gc",
    "plan_gc": "cachetool.maintenance.gc.plan",
    "GcOptions": "cachetool.maintenance.gc",
    "break_lease": "cachetool.maintenance.liveness",
    "pin": "cachetool.maintenance.pinning",
    "unpin": "cachetool.maintenance.pinning",
    "list_pins": "cachetool.maintenance.pinning",
    # explain, stats
    "explain": "cachetool.history.explain.explainer",
    "explain_fingerprint": "cachetool.history.explain.explainer",
    "explain_run": "cachetool.history.explain.explainer",
    "ledger_stats": "cachetool.history.ledger_stats",
    "zero_stats": "cachetool.history.ledger_stats",
    # check-determinism
    "check_determinism": "cachetool.determinism.check",
    "checkpoint": "cachetool.determinism.checkpoint",
    # report
    "write_report": "cachetool.report.html",
    # merge
    "merge_documents": "cachetool.maintenance.fleet",
    # what they return
    "CacheReport": "cachetool.cache.model",
    "DatasetDir": "cachetool.cache.model",
    "Entry": "cachetool.cache.model",
    "CacheFile": "cachetool.cache.model",
    "Kind": "cachetool.cache.layout",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cachetool' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
