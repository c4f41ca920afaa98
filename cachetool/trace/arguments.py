"""What a step was given, as its record says it: the transform `datasets` hashed, each argument
(digest, short repr, type; summaries for `explain`, hash trees in determinism runs), the user's
function (source and code hashes, helpers it reaches by name), a random fallback. Nothing here
calls a user-defined `__repr__` or raises into a traced call.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import site
import sys
import sysconfig
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cachetool.fingerprint.hashing import by_reference
from cachetool.history.records.parts import ArgInfo, ColumnHead, FunctionInfo, FunctionRef, RandomFallback
from cachetool.trace.calls import Frame, HashEvent

if TYPE_CHECKING:
    from cachetool.fingerprint.tree import HashNode


_FN_INFO: dict[Any, FunctionInfo] = {}  # code object -> the "function" field of records
#: Source hash -> the text of a user function, for "source" records.
SOURCES: dict[str, dict[str, Any]] = {}
_SCALAR_TYPES = frozenset({"bool", "int", "float", "str", "NoneType"})
_GIVEN_FINGERPRINTS = ("new_fingerprint", "train_new_fingerprint", "test_new_fingerprint")


class Arguments:
    """Turns the hash inputs of steps into the fields of their records (`transform`, `args`,
    `function`, `random_fallback`, `fingerprint_given`). `trees`: add each argument's hash tree
    (determinism runs); `summaries`: add bounded summaries to steps that computed (the ledger)."""

    def __init__(self, *, trees: bool, summaries: bool) -> None:
        self.trees = trees
        self.summaries = summaries
        # One `ArgInfo` per distinct value: the arguments of a pipeline's steps repeat (the same
        # function, the same flags), and a frozen record part can be shared.
        self._arg_infos: dict[tuple[str | None, str | None, str], ArgInfo] = {}

    def hashed(
        self, h: HashEvent, *, described: bool = False, after: bool = False, summaries: bool = False
    ) -> dict[str, Any]:
        """What `datasets` hashed for a step: the transform, each argument (digest, repr, type;
        its hash tree in determinism runs), the user's function, a random fallback.

        `described`: an argument too large for a repr gets a readable one (`20000 ints, digest …`).
        `after` (determinism runs): an argument the step itself changed (its digest at the end
        differs) gets its tree after the step. `summaries` (the ledger, for `explain`): each
        argument whose repr does not say all (not a plain scalar or an empty container) gets one.
        """
        args = h.args if isinstance(h.args, Mapping) else {}
        keys = sorted(args)
        digests = h.digests
        out: dict[str, ArgInfo] = {}
        for i, key in enumerate(keys):
            value, pos = args[key], 3 + 2 * i  # digests: [parent, transform, key0, value0, ...]
            digest = digests[pos] if pos < len(digests) else None
            shown = safe_repr(value)
            if shown is None and described:
                shown = describe_value(value, digest)
            info = self.arg_info(digest, shown, type_name(value))
            more: dict[str, Any] = {}
            if self.trees:
                more["tree"] = tree = (h.trees or {}).get(str(key))
                # A dataset argument's digest follows fingerprints, not the step.
                if after and digest is not None and isinstance(tree, Mapping) and not _is_dataset(tree):
                    now = try_hash(value)
                    if now is not None and now != digest:
                        more["after"] = hash_tree(value)
            says_all = shown is not None and (info.type in _SCALAR_TYPES or shown in ("{}", "[]", "()"))
            if summaries and not says_all and key not in ("fingerprint_name", "new_fingerprint"):
                more["summary"] = summarize(value)
            out[str(key)] = dataclasses.replace(info, **more) if more else info
        fields: dict[str, Any] = {"transform": transform_string(h.transform), "args": out}
        fn = args.get("function")
        if fn is not None:
            fields["function"] = self.function_info(fn, args.get("fn_kwargs"))
        if h.random:
            index = (h.error_at - 2) // 2 if h.error_at is not None and h.error_at >= 2 else len(keys)
            argument = str(keys[index]) if index < len(keys) else None
            fields["random_fallback"] = RandomFallback(argument, h.error, h.error_type, h.predictable)
        return fields

    def unhashed(self, frame: Frame) -> dict[str, Any]:
        """A call that hashed nothing (`new_fingerprint=` given): its arguments' reprs, no digests."""
        try:
            bound = inspect.signature(frame.original).bind_partial(*frame.args, **frame.kwargs).arguments
        except (TypeError, ValueError):
            bound = dict(frame.kwargs)
        out: dict[str, ArgInfo] = {}
        for i, (name, value) in enumerate(bound.items()):
            if i == 0 and frame.kind in ("transform", "inplace", "save"):
                continue  # the dataset itself
            items = list(value.items()) if name == "kwargs" and isinstance(value, dict) else [(name, value)]
            for k, v in items:
                out[str(k)] = ArgInfo(None, safe_repr(v) or describe_value(v, None), type_name(v))
        fn = frame.kwargs.get("function")
        if fn is None and frame.op in ("map", "filter") and len(frame.args) > 1:
            fn = frame.args[1]
        return {
            "args": out,
            "function": self.function_info(fn) if callable(fn) else None,
            "fingerprint_given": any(isinstance(frame.kwargs.get(k), str) for k in _GIVEN_FINGERPRINTS),
        }

    def value_info(self, value: Any) -> ArgInfo:
        """A value a step's fingerprint depends on that `datasets` hashes out of sight (a
        generator builder's `gen_kwargs`, hashed into its config id), described as an argument."""
        info = ArgInfo(try_hash(value), safe_repr(value), type_name(value))
        if self.trees:
            return dataclasses.replace(info, tree=hash_tree(value))
        return dataclasses.replace(info, summary=summarize(value)) if self.summaries else info

    def function_info(self, fn: Any, fn_kwargs: Any = None) -> FunctionInfo:
        """The `function` field for `fn`, described once per code object (and functions given in
        `fn_kwargs`, helpers it calls too) and process."""
        target, code = unwrap(fn)
        given = _given_functions(fn, fn_kwargs)
        key = (code if code is not None else id(target), *map(id, given))
        info = _FN_INFO.get(key)
        if info is None:
            info = _FN_INFO[key] = describe(fn, SOURCES, given)
        return info

    def arg_info(self, digest: str | None, shown: str | None, type_: str) -> ArgInfo:
        key = (digest, shown, type_)
        info = self._arg_infos.get(key)
        if info is None:
            if len(self._arg_infos) >= 4096:
                self._arg_infos.clear()
            info = self._arg_infos[key] = ArgInfo(digest, shown, type_)
        return info


def operation_of(transform: Any) -> str:
    """`datasets.arrow_dataset.Dataset.filter@2.0.1` -> `filter`; `..._map_single` -> `map`."""
    if callable(transform):
        name = getattr(transform, "__name__", "transform")
    else:
        name = str(transform).split("@", 1)[0].rsplit(".", 1)[-1]
    internal = {"_map_single": "map", "_concatenate_map_style_datasets": "concatenate_datasets"}
    return internal.get(name) or name.lstrip("_") or "transform"


def transform_string(transform: Any) -> str:
    if isinstance(transform, str):
        return transform
    module = getattr(transform, "__module__", None) or ""
    qualname = getattr(transform, "__qualname__", None) or type(transform).__name__
    return f"{module}.{qualname}" if module else qualname


_PLAIN = (bool, int, float, type(None))


def safe_repr(value: Any, budget: int = 120) -> str | None:
    """A short repr of small plain values (numbers, short strings, small containers of them);
    None for anything else."""
    out = _safe_repr(value, budget, 3)
    return out if out is not None and len(out) <= budget else None


def _safe_repr(value: Any, budget: int, depth: int) -> str | None:
    t = type(value)
    if t in _PLAIN or (t is str and len(value) <= budget):
        return repr(value)
    if depth <= 0 or t not in (list, tuple, set, frozenset, dict) or len(value) > 12:
        return None
    if t is dict:
        items = [x for pair in value.items() for x in pair]
    else:
        items = sorted(value, key=repr) if t in (set, frozenset) else value
    reprs = [_safe_repr(v, budget, depth - 1) for v in items]
    if None in reprs:
        return None
    if t is dict:
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(reprs[::2], reprs[1::2], strict=True)) + "}"
    body = ", ".join(reprs)  # type: ignore[arg-type]
    if t is list:
        return f"[{body}]"
    if t is tuple:
        return f"({body}{',' if len(reprs) == 1 else ''})"
    return ("{" + body + "}") if reprs and t is set else f"{t.__name__}({{{body}}})"


_NUMBER_KINDS = {"int": "ints", "float": "floats", "bool": "bools", "str": "strings"}


def describe_value(value: Any, digest: str | None, budget: int = 120) -> str | None:
    """A bounded description of an argument too large or too rich for `safe_repr`: a range as
    written (`range(0, 20000)`), a long sequence as its length, element kind and digest
    (`20000 ints, digest 3f2a…`), `Features` as `name: dtype` pairs; None for anything else."""
    try:
        t = type(value)
        if t is range:
            return repr(value)
        if t.__name__ == "Features" or (t is dict and value and all(_is_feature(v) for v in value.values())):
            body = ", ".join(f"{k}: {_feature_str(v)}" for k, v in value.items())
            return body if len(body) <= budget else body[: budget - 1] + "…"
        if t in (list, tuple):
            kinds = {type(x).__name__ for x in value[:64]}
            kind = kinds.pop() if len(kinds) == 1 else "value"
            noun = _NUMBER_KINDS.get(kind, f"{kind}s")
        elif t.__name__ == "ndarray":
            kind = str(value.dtype).lstrip("u")  # uint8 -> int8: ints
            noun = next((f"{k}s" for k in ("int", "float", "bool") if kind.startswith(k)), f"{kind} values")
        else:
            return None
        return f"{len(value)} {noun}" + (f", digest {digest}" if digest else "")
    except Exception:  # an odd object: no description rather than a failed record
        return None


def _is_dataset(tree: Mapping[str, Any]) -> bool:
    return str(tree.get("t", "")).startswith("datasets.")


def _is_feature(value: Any) -> bool:
    return type(value).__module__.startswith("datasets.features")


def _feature_str(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return dtype if isinstance(dtype, str) else type(value).__name__


_TYPE_NAMES: dict[type, str] = {}


def type_name(value: Any) -> str:
    t = type(value)
    name = _TYPE_NAMES.get(t)
    if name is None:
        name = _TYPE_NAMES[t] = (
            t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        )
    return name


def try_hash(value: Any) -> str | None:
    """`Hasher.hash(value)`, or None when it cannot be pickled."""
    from cachetool.fingerprint.hashing import try_hash as digest_or_error

    return digest_or_error(value)[0]


def hash_tree(value: Any) -> Any:
    """The hash tree of `value` (`cachetool.fingerprint.tree`), or an error node."""
    from cachetool.fingerprint.tree import build_tree

    try:
        return build_tree(value)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


#: Values per column kept for a dataset built in memory (determinism runs), to name the first one
#: that differs between runs.
COLUMN_HEAD = 50


def column_heads(dataset: Any) -> dict[str, ColumnHead]:
    """Per column of an in-memory dataset: the digest of the column and the short reprs of its first
    values, so that a source built at run time (`from_pandas` of a frame with a timestamp column)
    is explained by the column and the first value that differs."""
    from cachetool.fingerprint.tree import short_repr

    out: dict[str, ColumnHead] = {}
    try:
        table = dataset.data.table
        for name in table.column_names[:64]:
            column = table.column(name)
            head = tuple(short_repr(v) for v in column.slice(0, COLUMN_HEAD).to_pylist())
            out[str(name)] = ColumnHead(try_hash(column), head)
    except Exception:  # an odd table: the fingerprint still says the source differs
        return out
    return out


# Summaries: `cachetool explain` says *what* changed between two runs of a step by diffing the hash
# trees of their arguments, and the ledger keeps a bounded one: the top levels (digests, types,
# short reprs of small leaves), cut to a byte budget. They are made only for steps that computed
# their result or fell back to a random fingerprint: a hit's earlier computation has one already.

#: Levels of the tree kept below the argument.
MAX_DEPTH = 3
#: Nodes built per argument before the byte budget is applied.
MAX_NODES = 80
#: Items of a long container that are looked at.
MAX_ITEMS = 8
#: Bytes of JSON per argument summary; deeper levels are dropped until it fits.
MAX_BYTES = 2500
_REPR = 48
_ERROR = 120
# Parts of a code object a person does not read; their digests still say that they differ.
_NO_REPR = ("bytecode", "linetable", "varnames", "names")


def summarize(value: Any) -> dict[str, Any] | None:
    """A bounded summary of `value`'s hash tree, or None when no tree can be built."""
    from cachetool.fingerprint.tree import as_node, build_tree, graft

    try:
        tree = build_tree(value, max_depth=MAX_DEPTH, max_nodes=MAX_NODES, max_items=MAX_ITEMS)
    except Exception:  # a summary is a nicety; never a reason to lose the record
        return None
    node = _compact(tree)
    for keep in range(MAX_DEPTH - 1, -1, -1):
        if len(json.dumps(node, ensure_ascii=False, separators=(",", ":"))) <= MAX_BYTES:
            break
        node = _cut(node, keep)  # at worst the argument alone: a digest, a type and a short repr
    try:
        from cachetool.fingerprint.diff import varies_by_itself

        # Below the cut, the parts that vary between processes by themselves (a frozenset of str in
        # a set literal of a method, a uuid on an attribute's attribute): explain names them.
        return _compact(graft(value, as_node(node), varies_by_itself, max_items=MAX_ITEMS))
    except Exception:
        return node


def _compact(node: HashNode) -> dict[str, Any]:
    out: dict[str, Any] = {"l": node.get("l", ""), "t": node.get("t"), "d": node.get("d")}
    desc = node.get("s")
    if isinstance(desc, str) and desc != node.get("t") and len(desc) <= _REPR:
        out["s"] = desc
    r = node.get("r")
    if isinstance(r, str) and len(r) <= _REPR and str(out["l"]) not in _NO_REPR:
        out["r"] = r
    if "e" in node:
        out["e"] = str(node["e"])[:_ERROR]
    out.update({key: node[key] for key in ("o", "x") if key in node})
    if node.get("c"):
        out["c"] = [_compact(c) for c in node["c"]]
    return out


def _cut(node: dict[str, Any], depth: int) -> dict[str, Any]:
    """The same tree without the nodes below `depth` (their parents are marked ``x: "depth"``)."""
    out = dict(node)
    if "c" in out and depth <= 0:
        del out["c"]
        out["x"] = "depth"
    elif "c" in out:
        out["c"] = [_cut(c, depth - 1) for c in out["c"]]
    return out


# The user's function: enough to tell later that its code changed.

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


#: The most items a value of a module `reads` describes (a larger one is not compared).
MAX_READ_ITEMS = 100_000
_READ_LEAVES = (str, bytes, int, float, bool, type(None))


def reads(fn: types.FunctionType) -> dict[str, str]:
    """The digest of each plain value (numbers, text, and lists, tuples, sets and dicts of them)
    of its module that `fn` reads by name (`module.NAME` of a module of the user's, and in a
    method `Class.NAME`, a value of its class): what `datasets` does not see of a function it
    hashes by name. Sets and dicts are described in a sorted order, so a digest is the same in
    every process; any other value (a function, a class, an object) is left out."""
    g = _imported_here(fn)
    names = list(dict.fromkeys(_names(fn.__code__)))
    values = {n: g[n] for n in names if n in g}
    for module in _user_modules(names, g):  # `config.MAX_LEN`, `pkg.config.MAX_LEN`
        values.update((f"{module.__name__}.{n}", vars(module)[n]) for n in names if n in vars(module))
    owner = _owner_class(fn)  # a method reads its class's values through `self` (`self.LIMIT`)
    mro = owner.__mro__ if owner is not None else ()
    for k in reversed(mro):  # not an annotated one: a default of the object's own (a dataclass field)
        own = [n for n in names if n in vars(k) and n not in vars(k).get("__annotations__", {})]
        values.update((f"{mro[0].__name__}.{n}", vars(k)[n]) for n in own)
    out: dict[str, str] = {}
    for name, value in values.items():
        text = _canonical(value, [MAX_READ_ITEMS])
        if text is not None:
            out[name] = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return out


def _canonical(value: Any, budget: list[int]) -> str | None:
    """A text that is the same for equal plain values in any process; None for anything else or
    more than the budget of items."""
    budget[0] -= 1
    if budget[0] < 0:
        return None
    if isinstance(value, _READ_LEAVES):
        if isinstance(value, (str, bytes)):
            budget[0] -= len(value) // 100  # a long text counts as many items
            if budget[0] < 0:
                return None
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        items = value.items() if isinstance(value, dict) else ((x, None) for x in value)
        parts = []
        for k, v in items:
            ck = _canonical(k, budget)
            cv = _canonical(v, budget) if isinstance(value, dict) else ""
            if ck is None or cv is None:
                return None
            parts.append(f"{ck}={cv}" if isinstance(value, dict) else ck)
        if isinstance(value, (set, frozenset, dict)):
            parts.sort()
        return f"{type(value).__name__}[{','.join(parts)}]"
    return None


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


def _given_functions(fn: Any, fn_kwargs: Any) -> tuple[types.FunctionType, ...]:
    """The functions `fn` is given rather than names: in `fn_kwargs`, bound by a
    `functools.partial`, or held by the object whose method (or `__call__`) it is (`self.fix`);
    for an object of a class of the user's given so (`tok`), the methods of it `fn` names."""
    _, code = unwrap(fn)
    names = _names(code) if code is not None else []
    values = list(fn_kwargs.values()) if isinstance(fn_kwargs, dict) else []
    for _ in range(8):
        if not isinstance(fn, functools.partial):
            break
        values += [*fn.args, *fn.keywords.values()]
        fn = fn.func
    owner = fn.__self__ if isinstance(fn, types.MethodType) else fn
    if not isinstance(owner, (type, types.ModuleType, types.FunctionType)):
        values += list(getattr(owner, "__dict__", {}).values())
    found = [f for v in values for f in ([v] if isinstance(v, types.FunctionType) else _methods_of(v, names))]
    return tuple(dict.fromkeys(found))


def describe(
    fn: Any, sources: dict[str, dict[str, Any]], given: tuple[types.FunctionType, ...] = ()
) -> FunctionInfo:
    """The `function` field of a record for `fn` (`given`: functions it is given, as helpers it
    calls); the source texts it names are added to `sources` (source hash -> {"qualname", "file",
    "line", "text", "truncated"})."""
    target, code = unwrap(fn)
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    if module not in (None, "__main__", "__mp_main__"):
        qualname = f"{module}.{qualname}"
    plain = isinstance(target, types.FunctionType)
    named = by_reference(target)
    return FunctionInfo(
        **_ref(qualname, code, source_of(target), sources),
        reads=reads(target) if named and plain else {},
        by_reference=named,
        deps=_deps(target, sources, given) if plain else (),
    )


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


def _deps(
    fn: types.FunctionType, sources: dict[str, dict[str, Any]], given: tuple[types.FunctionType, ...]
) -> tuple[FunctionRef, ...]:
    """User-module functions pickled by reference that `fn` reaches (through its globals, or
    `given` it), and those reach."""
    out: list[FunctionRef] = []
    seen: set[int] = {id(fn)}
    queue: list[types.FunctionType] = [fn]
    while queue and len(out) < MAX_DEPS:
        current = queue.pop(0)
        for callee in [*_referenced_functions(current), *(given if current is fn else ())]:
            if id(callee) in seen:
                continue
            seen.add(id(callee))
            if not is_user_file(callee.__code__.co_filename):
                continue
            queue.append(callee)
            if by_reference(callee):  # a change of one pickled by value changes the fingerprint
                qualname = f"{callee.__module__}.{callee.__qualname__}"
                ref = _ref(qualname, callee.__code__, source_of(callee), sources)
                out.append(FunctionRef(**ref, reads=reads(callee)))
            if len(out) >= MAX_DEPS:
                break
        known = {ref.qualname for ref in out}
        out.extend(
            [r for r in _not_imported(current, sources) if r.qualname not in known][: MAX_DEPS - len(out)]
        )
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _local_imports(code: types.CodeType, depth: int = 0) -> tuple[str, ...]:
    """The modules a function imports in its body (`import helpers`, `from helpers import clean`)."""
    import dis

    found = [str(i.argval) for i in dis.get_instructions(code) if i.opname == "IMPORT_NAME"]
    if depth < 10:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                found.extend(_local_imports(const, depth + 1))
    return tuple(found)


def _imported_here(fn: types.FunctionType) -> Mapping[str, Any]:
    """`fn`'s globals, and the modules of the user's it imports in its body that are imported by
    now, under the names its code uses for them (`helpers`, `pkg` and `pkg.text`)."""
    local: dict[str, Any] = {}
    for name in _local_imports(fn.__code__):
        for part in {name, name.split(".", 1)[0]}:
            if part not in fn.__globals__ and part in sys.modules:
                local[part] = sys.modules[part]
    return collections.ChainMap(local, fn.__globals__) if local else fn.__globals__


def _not_imported(fn: types.FunctionType, sources: dict[str, dict[str, Any]]) -> list[FunctionRef]:
    """The functions `fn` names of a module of the user's that it imports in its body and that
    is not imported yet (it runs no earlier than the step computes: on a cache hit, never),
    found in the module's source file without importing it. `datasets` hashes the import by
    name only, so an edit of one leaves the step's result stale."""
    import ast
    import importlib.util

    out: list[FunctionRef] = []
    names = set(_names(fn.__code__))
    for module in dict.fromkeys(_local_imports(fn.__code__)):
        if "." in module or module in sys.modules:  # a package's part would import the package
            continue
        try:
            spec = importlib.util.find_spec(module)
            path = spec.origin if spec is not None else None
            if path is None or not path.endswith(".py") or not is_user_file(path):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.splitlines(keepends=True)
            tree = ast.parse(text)
        except Exception:  # an odd module: the fingerprint still says what it says
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                source = "".join(inspect.getblock(lines[first - 1 :]))
                ref = {**_ref(f"{module}.{node.name}", None, source, sources), "file": path, "line": first}
                out.append(FunctionRef(**ref, reads={}))
                kept = {"text": source[:MAX_SOURCE_CHARS], "truncated": len(source) > MAX_SOURCE_CHARS}
                sources.setdefault(
                    ref["source_hash"], {"qualname": ref["qualname"], "file": path, "line": first, **kept}
                )
    return out


def _names(code: types.CodeType, depth: int = 0) -> list[str]:
    names = list(code.co_names)
    if depth < 10:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names.extend(_names(const, depth + 1))
    return names


def _user_modules(names: list[str], g: Mapping[str, Any]) -> list[types.ModuleType]:
    """The modules of the user's that code with these `names` reaches from its globals `g`:
    `helpers` of `helpers.clean`, and `pkg` and `pkg.a` of `pkg.a.clean`."""
    found: list[types.ModuleType] = []
    queue = [g.get(name) for name in dict.fromkeys(names)]
    while queue:
        module = queue.pop()
        if not isinstance(module, types.ModuleType) or any(module is m for m in found):
            continue
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", ())), None)
        if is_user_file(where):
            found.append(module)
            queue.extend(vars(module).get(name) for name in names)
    return found


def _owner_class(fn: types.FunctionType) -> type | None:
    """The class whose method `fn` is (`Norm.__call__`), found by its qualified name."""
    *path, _ = fn.__qualname__.split(".")
    owner: Any = fn.__globals__.get(path[0]) if path and "<locals>" not in path else None
    for part in path[1:]:
        owner = getattr(owner, part, None)
    return owner if isinstance(owner, type) else None


def _referenced_functions(fn: types.FunctionType) -> list[types.FunctionType]:
    """Functions `fn` names through its globals (`helper(x)`, `module.helper(x)`), its closure or
    its defaults, or, in a method, through `self` (`self.clean(x)`: of its class or of a base)."""
    names = _names(fn.__code__)
    g = _imported_here(fn)
    found: list[types.FunctionType] = []
    owner = _owner_class(fn)
    mro = owner.__mro__ if owner is not None else ()
    for name in dict.fromkeys(names) if mro else ():
        method = next((vars(k)[name] for k in mro if name in vars(k)), None)
        method = getattr(method, "__func__", method)  # a staticmethod's or classmethod's function
        if isinstance(method, types.FunctionType):
            found.append(method)
    for name in dict.fromkeys(names):
        value = g.get(name)
        if isinstance(value, types.FunctionType):
            found.append(value)
        else:
            found.extend(_methods_of(value, names))
    for module in _user_modules(names, g):
        for name in dict.fromkeys(names):
            value = getattr(module, name, None)
            found.extend([value] if isinstance(value, types.FunctionType) else _methods_of(value, names))
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        found.extend([value] if isinstance(value, types.FunctionType) else _methods_of(value, names))
    defaults = (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values())  # `def f(r, fix=clean)`
    for v in defaults:
        found.extend([v] if isinstance(v, types.FunctionType) else _methods_of(v, names))
    return found


def _methods_of(value: Any, names: list[str]) -> list[types.FunctionType]:
    """A user class, or an object of one, that code naming `names` calls or is given: its methods
    run too, and an object pickles its attributes but names its class (the code of its methods is
    not in the fingerprint). Those the code names (`Text.clean(x)`, `tok.encode(x)`) and the
    special ones (`__call__`); static and class methods too."""
    if value is None or isinstance(value, (types.ModuleType, types.BuiltinFunctionType, types.FunctionType)):
        return []
    cls = value if isinstance(value, type) else type(value)
    if not is_user_file(getattr(sys.modules.get(cls.__module__), "__file__", None)):
        return []
    wanted = set(names)
    named = (v for c in cls.__mro__ for k, v in vars(c).items() if k in wanted or k[:2] == "__")
    methods = (getattr(v, "__func__", v) for v in named)
    return [v for v in methods if isinstance(v, types.FunctionType)]
