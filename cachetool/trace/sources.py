"""What the tracer records about the user's function: enough to tell later that its code changed.

`datasets` pickles a function of the user's own modules by reference: editing it keeps the
fingerprint. So, once per code object and process, the tracer records its source hash, `code_hash`,
whether it is pickled `by_reference`, the `deps` it reaches that are (at most `MAX_DEPS`), and their
source texts (one `"source"` record per process and root).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import site
import sys
import sysconfig
import types
from typing import Any

#: At most this many helper functions per recorded function.
MAX_DEPS = 16
#: Source texts longer than this are cut (and marked truncated).
MAX_SOURCE_CHARS = 20_000


@functools.cache
def _system_prefixes() -> tuple[str, ...]:
    """The folders of the standard library, installed packages and cachetool itself."""
    installed = sysconfig.get_paths()
    paths = {installed[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if installed.get(k)}
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with contextlib.suppress(Exception):  # some embedded interpreters have no getsitepackages
        paths.update(site.getsitepackages())
    return tuple(sorted({os.path.realpath(p).rstrip(os.sep) + os.sep for p in paths}))


def is_user_file(filename: str | None) -> bool:
    """A file of the user's own code: not the standard library, not an installed package, not
    cachetool. A package installed in editable mode from the user's project counts as theirs."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.realpath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(_system_prefixes())


def by_reference(fn: Any) -> bool:
    """Whether dill (and so `datasets`) pickles this function as module + name, not as code."""
    module = getattr(fn, "__module__", None)
    if module in (None, "__main__", "__mp_main__"):
        return False
    qualname = getattr(fn, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname:
        return False
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn


def code_hash(code: types.CodeType) -> str:
    """A digest of what a function does: bytecode, constants (nested code recursively) and names,
    not its line numbers or file."""
    h = hashlib.sha256()
    _feed_code(h, code, 0)
    return h.hexdigest()[:16]


def _feed_code(h: Any, code: types.CodeType, depth: int) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr((code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if depth < 20:
                _feed_code(h, const, depth + 1)
        else:
            try:
                text = repr(sorted(const, key=repr)) if isinstance(const, frozenset) else repr(const)
            except Exception:
                text = type(const).__name__
            h.update(text.encode("utf-8", "surrogateescape"))
        h.update(b"\x00")


def source_of(target: Any) -> str | None:
    """The source text of a function, or None when it has none (a lambda typed at a prompt)."""
    try:
        return inspect.getsource(target)
    except Exception:  # no source, or an odd object: a broken __wrapped__, a file that vanished
        return None


def source_hash(source: str | None, code: types.CodeType | None) -> str | None:
    """``sha256:<16 hex>`` of the source text; ``code:<16 hex>`` when there is no source."""
    if source is not None:
        return "sha256:" + hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    if code is not None:
        return "code:" + code_hash(code)
    return None


def unwrap(fn: Any) -> tuple[Any, types.CodeType | None]:
    """The plain function behind a partial, a bound method or a callable object, and its code."""
    target = fn
    for _ in range(8):
        if isinstance(target, functools.partial):
            target = target.func
        else:
            break
    target = getattr(target, "__func__", target)
    code = getattr(target, "__code__", None)
    if code is None:
        call = vars(type(target)).get("__call__")
        call = getattr(call, "__func__", call)
        code = getattr(call, "__code__", None)
        if code is not None:
            target = call
    return target, code if isinstance(code, types.CodeType) else None


def describe(fn: Any, sources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The `function` field of a record for `fn`; the source texts it names are added to `sources`
    (source hash -> {"qualname", "file", "line", "text", "truncated"})."""
    target, code = unwrap(fn)
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    if module not in (None, "__main__", "__mp_main__"):
        qualname = f"{module}.{qualname}"
    info = _ref(qualname, code, source_of(target), sources)
    info["by_reference"] = by_reference(target)
    info["deps"] = _deps(target, sources) if isinstance(target, types.FunctionType) else []
    return info


def _ref(
    qualname: str, code: types.CodeType | None, source: str | None, sources: dict[str, Any]
) -> dict[str, Any]:
    """A function's name, place and hashes; its source text goes to `sources` when it is the user's."""
    shash = source_hash(source, code)
    ref = {
        "qualname": qualname,
        "file": code.co_filename if code is not None else None,
        "line": code.co_firstlineno if code is not None else None,
        "source_hash": shash,
        "code_hash": code_hash(code) if code is not None else None,
    }
    if code is not None and shash is not None and source is not None and is_user_file(code.co_filename):
        text = {"text": source[:MAX_SOURCE_CHARS], "truncated": len(source) > MAX_SOURCE_CHARS}
        sources.setdefault(shash, {"qualname": qualname, "file": ref["file"], "line": ref["line"], **text})
    return ref


def _deps(fn: types.FunctionType, sources: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """User-module functions pickled by reference that `fn` reaches through its globals."""
    out: list[dict[str, Any]] = []
    seen: set[int] = {id(fn)}
    queue: list[types.FunctionType] = [fn]
    while queue and len(out) < MAX_DEPS:
        for callee in _referenced_functions(queue.pop(0)):
            if id(callee) in seen:
                continue
            seen.add(id(callee))
            if not is_user_file(callee.__code__.co_filename):
                continue
            queue.append(callee)
            if by_reference(callee):  # a change of one pickled by value changes the fingerprint
                qualname = f"{callee.__module__}.{callee.__qualname__}"
                out.append(_ref(qualname, callee.__code__, source_of(callee), sources))
            if len(out) >= MAX_DEPS:
                break
    return out


def _names(code: types.CodeType, depth: int = 0) -> list[str]:
    names = list(code.co_names)
    if depth < 10:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names.extend(_names(const, depth + 1))
    return names


def _referenced_functions(fn: types.FunctionType) -> list[types.FunctionType]:
    """Functions `fn` names through its globals (`helper(x)`, `module.helper(x)`) or closure."""
    names = _names(fn.__code__)
    g = fn.__globals__
    found: list[types.FunctionType] = []
    modules: list[types.ModuleType] = []
    for name in dict.fromkeys(names):
        value = g.get(name)
        if isinstance(value, types.FunctionType):
            found.append(value)
        elif isinstance(value, types.ModuleType) and is_user_file(getattr(value, "__file__", None)):
            modules.append(value)
        elif value is not None and not isinstance(value, (types.ModuleType, types.BuiltinFunctionType)):
            # A user class called in the function, or an object of one: its methods run too, and an
            # object pickles its attributes but names its class (the code of its methods is not in
            # the fingerprint).
            cls = value if isinstance(value, type) else type(value)
            if is_user_file(getattr(sys.modules.get(cls.__module__), "__file__", None)):
                found.extend(v for v in vars(cls).values() if isinstance(v, types.FunctionType))
    for module in modules:
        for name in dict.fromkeys(names):
            value = getattr(module, name, None)
            if isinstance(value, types.FunctionType):
                found.append(value)
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, types.FunctionType):
            found.append(value)
    return found
