"""Replacing functions of `datasets` so that every replacement pickles exactly as its original
under dill: tracing never changes a fingerprint.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


class Patches:
    """The attributes replaced so far, to restore in reverse order."""

    def __init__(self) -> None:
        self.patches: list[tuple[Any, str, Any]] = []  # (object, name, original)
        self._replacements: dict[int, Any] = {}

    def patch(self, obj: Any, name: str, replacement: Callable[..., Any]) -> None:
        """Put `replacement` in the place of `obj.name` (a function, or the function inside a
        classmethod or staticmethod), pickling as the original does."""
        original = vars(obj)[name] if isinstance(obj, type) else getattr(obj, name)
        self.patches.append((obj, name, original))
        inner = original.__func__ if isinstance(original, (classmethod, staticmethod)) else original
        # One replacement per original: every module that imported a function by name holds the
        # same object, the one dill finds under the function's own name.
        value = self._replacements.get(id(inner))
        if value is None:
            if isinstance(original, classmethod) or not isinstance(inner, types.FunctionType):
                value = PickledAsOriginal(inner, replacement)  # dill pickles the original by value
            else:
                value = function_as_original(inner, replacement)
            self._replacements[id(inner)] = value
        if isinstance(original, (classmethod, staticmethod)):
            value = type(original)(value)
        setattr(obj, name, value)

    def patch_imported(self, replacements: Mapping[str, tuple[Any, Callable[..., Any]]]) -> None:
        """Put each replacement (`name`: (original, replacement)) in every `datasets` module that
        imported the original by name."""
        for mod_name, mod in list(sys.modules.items()):
            d = getattr(mod, "__dict__", None)
            if (mod_name == "datasets" or mod_name.startswith("datasets.")) and isinstance(d, dict):
                for name, (orig, replacement) in replacements.items():
                    if d.get(name) is orig:
                        self.patch(mod, name, replacement)

    def restore(self) -> None:
        """Put every original back (in reverse order)."""
        for obj, name, original in reversed(self.patches):
            with contextlib.suppress(Exception):
                setattr(obj, name, original)
        self.patches.clear()
        self._replacements.clear()


class PickledAsOriginal:
    """A replacement for a `datasets` function that dill (and every pickler built on it) pickles
    with the same bytes as the original: by reference under its qualified name, else the original
    by value; `dill.detect.globalvars` sees the original's code, globals and closure. Fingerprints
    do not change under tracing. Calls go to the replacement; it binds like a function.
    """

    __wrapped__: Callable[..., Any]

    def __init__(self, original: Callable[..., Any], replacement: Callable[..., Any]) -> None:
        functools.update_wrapper(self, original)
        self.__wrapped__ = original
        self._replacement = replacement
        _register_with_dill()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._replacement(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # `isinstance(x, FunctionType)` answers as for the original
        return type(self.__wrapped__)

    def __getattr__(self, name: str) -> Any:  # __code__, __globals__, __closure__, __defaults__ ...
        return getattr(self.__wrapped__, name)


class _Call:
    """Calls the replacement; not a function, so dill's search for referenced globals stops here."""

    __slots__ = ("replacement",)

    def __init__(self, replacement: Callable[..., Any]) -> None:
        self.replacement = replacement

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.replacement(*args, **kwargs)


_TRAMPOLINES: dict[int, types.CodeType] = {}


def _trampoline_code(cells: int) -> types.CodeType:
    """`def f(*args, **kwargs): return call(*args, **kwargs)` with `cells` more free variables."""
    code = _TRAMPOLINES.get(cells)
    if code is None:
        names = "".join(f", cell{i}" for i in range(cells))
        source = (
            f"def outer(call{names}):\n"
            "    def trampoline(*args, **kwargs):\n"
            f"        if False:\n            (call{names})\n"
            "        return call(*args, **kwargs)\n"
            "    return trampoline\n"
        )
        namespace: dict[str, Any] = {}
        # Compiled as this file: call sites and tracebacks skip its frames like the hooks' own.
        exec(compile(source, __file__, "exec"), namespace)
        code = _TRAMPOLINES[cells] = namespace["outer"].__code__.co_consts[1]
    return code


def function_as_original(original: types.FunctionType, replacement: Callable[..., Any]) -> types.FunctionType:
    """A function (`datasets` hashes `type(value)` too) that calls `replacement` and that dill
    pickles as `original` (by reference under its qualified name); it holds the original's
    globals, closure and code, so `dill.detect.globalvars` finds what it finds from the original.
    """
    cells = original.__closure__ or ()
    template = _trampoline_code(len(cells))
    code = template.replace(co_consts=(*template.co_consts, original.__code__))
    by_name = {f"cell{i}": cell for i, cell in enumerate(cells)}
    by_name["call"] = types.CellType(_Call(replacement))
    closure = tuple(by_name[name] for name in code.co_freevars)
    function = types.FunctionType(code, original.__globals__, original.__name__, None, closure)
    functools.update_wrapper(function, original)
    return function


def _save_as_original(pickler: Any, obj: PickledAsOriginal) -> None:
    original = obj.__wrapped__
    module = sys.modules.get(getattr(original, "__module__", None) or "")
    found: Any = module
    for part in str(getattr(original, "__qualname__", "<")).split("."):
        found = getattr(found, part, None)
    save_function = pickler.dispatch.get(types.FunctionType)
    if found is obj and save_function is not None:
        # Where dill looks the original up by name, it now finds `obj`: saving `obj` as a
        # function writes the very reference the original gets.
        save_function(pickler, obj)
    else:
        pickler.save(original)


def _register_with_dill() -> None:
    """Teach every dill pickler class (each may hold its own copy of dill's dispatch table, as
    `datasets`' does) to save a `PickledAsOriginal` as its original."""
    dill = sys.modules.get("dill")
    base = getattr(dill, "Pickler", None)
    if base is None:
        return
    seen: set[int] = set()
    todo = [base]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        table = vars(cls).get("dispatch")
        if isinstance(table, dict) and id(table) not in seen:
            seen.add(id(table))
            table[PickledAsOriginal] = _save_as_original
