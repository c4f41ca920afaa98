"""Putting the hooks into `datasets` and taking them out again, without changing what pickles.

`find_hook_points()` checks that this `datasets` has every function and method the tracer hooks
(else tracing is off, said once); `Patches` puts each replacement in place and restores the
originals; `library_versions()` is what the records say the process ran with. Every replacement
pickles exactly as its original does under dill (`PickledAsOriginal`, `function_as_original`), so
tracing never changes a fingerprint of anything that references a replaced function.
"""

from __future__ import annotations

import contextlib
import functools
import platform
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = [
    "INPLACE_METHODS",
    "TRANSFORM_METHODS",
    "HookPoints",
    "Patches",
    "PickledAsOriginal",
    "find_hook_points",
    "function_as_original",
    "library_versions",
    "traced_methods",
    "warn",
]

#: Public `Dataset` methods traced as transforms (besides every `fingerprint_transform`-decorated one).
TRANSFORM_METHODS = (
    "map",
    "filter",
    "select",
    "sort",
    "shuffle",
    "train_test_split",
    "remove_columns",
    "rename_column",
    "rename_columns",
    "select_columns",
    "flatten",
    "cast",
    "cast_column",
    "add_column",
    "add_item",
    "batch",
    "flatten_indices",
    "shard",
    "skip",
    "take",
    "repeat",
    "with_format",
    "class_encode_column",
    "align_labels_with_mapping",
)
#: Methods that change the dataset in place (the result is `self` afterwards).
INPLACE_METHODS = ("set_format",)


def warn(message: str) -> None:
    """One line on stderr, never an exception."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"cachetool: warning: {message}\n")
        sys.stderr.flush()


def library_versions() -> dict[str, str]:
    """The versions of Python, cachetool and the imported `datasets`, dill and pyarrow ("?" for
    one not imported): what every record of a traced process says it ran with."""
    from cachetool import __version__

    out = {"python": platform.python_version(), "cachetool": __version__}
    for name in ("datasets", "dill", "pyarrow"):
        mod = sys.modules.get(name)
        out[name] = str(getattr(mod, "__version__", "?")) if mod is not None else "?"
    return out


class HookPoints(NamedTuple):
    """The modules and classes of `datasets` the tracer hooks into."""

    datasets: Any
    fingerprint: Any  # datasets.fingerprint
    arrow_dataset: Any  # datasets.arrow_dataset
    dataset_cls: type
    builder_cls: type
    hasher: type


def find_hook_points() -> HookPoints | None:
    """The hook points of the imported `datasets`; None (after one warning) when one is missing:
    the pipeline then runs untraced."""
    import datasets
    import datasets.arrow_dataset as ad
    import datasets.builder as builder_mod
    import datasets.fingerprint as fp_mod

    missing = [
        name
        for name in ("update_fingerprint", "generate_random_fingerprint", "Hasher")
        if not hasattr(fp_mod, name)
    ]
    missing += [
        f"arrow_dataset.{name}"
        for name in ("Dataset", "generate_fingerprint", "_concatenate_map_style_datasets")
        if not hasattr(ad, name)
    ]
    dataset_cls = getattr(ad, "Dataset", None)
    builder_cls = getattr(builder_mod, "DatasetBuilder", None)
    if dataset_cls is not None:
        missing += [
            f"Dataset.{m}"
            for m in (*INPLACE_METHODS, "save_to_disk", "load_from_disk", "_get_cache_file_path")
            if m not in vars(dataset_cls)
        ]
    if builder_cls is None or not all(
        hasattr(builder_cls, m) for m in ("as_dataset", "download_and_prepare", "_relative_data_dir")
    ):
        missing.append("DatasetBuilder.as_dataset/download_and_prepare")
    hasher = getattr(fp_mod, "Hasher", None)
    if hasher is not None and not isinstance(vars(hasher).get("hash"), classmethod):
        missing.append("Hasher.hash")
    if missing:
        warn(
            f"tracing is off: this datasets {getattr(datasets, '__version__', '?')} has no "
            f"{', '.join(missing[:5])}; the script runs untraced"
        )
        return None
    assert dataset_cls is not None and builder_cls is not None and hasher is not None
    return HookPoints(datasets, fp_mod, ad, dataset_cls, builder_cls, hasher)


def traced_methods(dataset_cls: type) -> tuple[list[str], list[str]]:
    """(the public `Dataset` methods traced as transforms, the `TRANSFORM_METHODS` this
    `datasets` lacks: 2.21 has no `repeat`; 2.14 no `skip`, `take`, `batch`)."""
    names = {m for m in TRANSFORM_METHODS if m in vars(dataset_cls)}
    for name, value in vars(dataset_cls).items():
        if not name.startswith("_") and _is_fingerprint_transform(value) and name not in INPLACE_METHODS:
            names.add(name)
    return sorted(names), [f"Dataset.{m}" for m in TRANSFORM_METHODS if m not in vars(dataset_cls)]


def _is_fingerprint_transform(value: Any) -> bool:
    f = getattr(value, "__func__", value)
    for _ in range(8):
        if f is None:
            return False
        if getattr(f, "_decorator_name_", None) == "fingerprint":
            return True
        f = getattr(f, "__wrapped__", None)
    return False


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
            if mod is None or not (mod_name == "datasets" or mod_name.startswith("datasets.")):
                continue
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
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


# ------------------------------------------------------------------------------------------
# Replacements that pickle as the originals
# ------------------------------------------------------------------------------------------


class PickledAsOriginal:
    """A replacement for a `datasets` function that pickles exactly as the original it wraps.

    dill, and every pickler built on it (`datasets`' hashing pickler, `multiprocess`), writes the
    same bytes for it as for the original: by reference where dill finds the original under its
    qualified name (the replacement now stands there), else the original itself (by value, as
    for `Hasher.hash`'s function). dill's search for the globals a pickled function refers to
    (`dill.detect.globalvars`) sees the original's code, globals and closure. So the fingerprint of
    anything that references a replaced function does not change under tracing, and unpickling
    gives the original back. Calls go to the replacement; as a class attribute it binds like a
    function.
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
    """A function that calls `replacement` and that dill pickles as `original`, for an original
    dill finds under its qualified name (a module function, a method). It is a function (`datasets`
    hashes `type(value)` too) and stands under that name, so dill pickles it by reference; for
    dill's search of the globals a pickled function refers to (`dill.detect.globalvars`) it has
    the original's globals, the original's closure cells, and the original's code among its
    constants (the search reads them), so the search finds exactly what it finds from the original.
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
