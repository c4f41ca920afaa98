"""A post-import hook: run a callback right after a module finishes importing, without importing it.

`install_tracing()` must not import `datasets` itself (it reads its environment at import), so a
finder at the front of `sys.meta_path` waits for the script's own `import datasets`, lets the real
finder and loader do their work, and calls the callback once the module has executed.
"""

from __future__ import annotations

import contextlib
import sys
import threading

# `cachetool run` imports this module before the script runs: nothing here may cost a script that
# never imports `datasets` (`importlib.abc` alone pulls in `importlib.resources`, `tempfile`,
# `pathlib`, `typing`); the finder and the loader follow the import protocol without its ABCs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable, Sequence
    from types import ModuleType
    from typing import Any

    Callback = Callable[[ModuleType], None]


class _Loader:
    def __init__(self, inner: Any, finder: _PostImportFinder) -> None:
        self.inner = inner
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first: the module must look as if it was imported normally.
        with contextlib.suppress(Exception):
            module.__loader__ = self.inner
            if module.__spec__ is not None:
                module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        self.finder.fire(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _PostImportFinder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.callbacks: list[Callback] = []
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self)  # type: ignore[assignment]  # the protocol, no ABC
        return spec

    def fire(self, module: ModuleType) -> None:
        remove_post_import_hooks(self.name)
        callbacks, self.callbacks = self.callbacks, []
        for cb in callbacks:
            try:
                cb(module)
            except Exception as e:  # the import itself succeeded; keep it that way
                sys.stderr.write(f"cachetool: warning: post-import hook for {self.name} failed: {e}\n")


def add_post_import_hook(name: str, callback: Callback) -> None:
    """Call `callback(module)` once `name` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _PostImportFinder) and finder.name == name:
            finder.callbacks.append(callback)
            return
    finder = _PostImportFinder(name)
    finder.callbacks.append(callback)
    sys.meta_path.insert(0, finder)


def remove_post_import_hooks(name: str) -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _PostImportFinder) and f.name == name)]
