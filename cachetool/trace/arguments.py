"""What a step was given, as its record says it: the transform `datasets` hashed, each argument
(its digest, a short repr or summary, its type; hash trees in determinism runs), the user's
function (its name, place, source and code hashes, the helpers it reaches) and a fallback to a
random fingerprint with the argument that caused it.

The per-argument digests come from watching `Hasher.hash` inside `update_fingerprint` (no second
pickling). The description of a function is made once per code object and process; the texts of
user functions it names are kept for the ledger's `"source"` records.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, NamedTuple

from cachetool.history.records.parts import ArgInfo, FunctionInfo, RandomFallback
from cachetool.trace.calls import Frame, HashEvent
from cachetool.trace.describe import (
    describe_value,
    hash_tree,
    safe_repr,
    transform_string,
    try_hash,
    type_name,
)
from cachetool.trace.sources import describe as describe_function
from cachetool.trace.sources import unwrap
from cachetool.trace.summary import summarize

__all__ = ["SOURCES", "Arguments", "Hashed"]

_FN_INFO: dict[Any, FunctionInfo] = {}  # code object -> the "function" field of records
#: Source hash -> the text of a user function, for "source" records.
SOURCES: dict[str, dict[str, Any]] = {}
_SCALAR_TYPES = frozenset({"bool", "int", "float", "str", "NoneType"})


class Hashed(NamedTuple):
    """What a step's record says about its hash inputs."""

    transform: str | None
    args: Mapping[str, ArgInfo]
    function: FunctionInfo | None
    random_fallback: RandomFallback | None
    fingerprint_given: bool = False


class Arguments:
    """Turns the hash inputs of steps into record parts. `trees`: add each argument's hash tree
    (determinism runs); `summaries`: add bounded summaries to steps that computed (the ledger)."""

    def __init__(self, *, trees: bool, summaries: bool) -> None:
        self.trees = trees
        self.summaries = summaries
        # Per code object, shared by every tracer of the process (tracing() may install twice).
        self._fn_info = _FN_INFO
        self._arg_infos: dict[tuple[str | None, str | None, str], ArgInfo] = {}

    def hashed(self, h: HashEvent) -> Hashed:
        """What `datasets` hashed for a step: the transform, each argument (digest, repr, type;
        its hash tree in determinism runs), the user's function, a random fallback."""
        args = h.args if isinstance(h.args, Mapping) else {}
        keys = sorted(args)
        digests = h.watch.digests
        out: dict[str, ArgInfo] = {}
        for i, key in enumerate(keys):
            pos = 3 + 2 * i  # [parent, transform, key0, value0, key1, value1, ...]
            value = args[key]
            tree = None
            if self.trees:
                tree = (h.trees or {}).get(str(key)) if h.trees is not None else hash_tree(value)
            digest = digests[pos] if pos < len(digests) else None
            if tree is None:
                out[str(key)] = self.arg_info(digest, safe_repr(value), type_name(value))
            else:
                out[str(key)] = ArgInfo(digest, safe_repr(value), type_name(value), tree=tree)
        fn = args.get("function")
        w = h.watch
        fallback = None
        if w.random:
            argument = None
            if w.error_at is not None and w.error_at >= 2:
                index = (w.error_at - 2) // 2
                argument = str(keys[index]) if index < len(keys) else None
            fallback = RandomFallback(argument, w.error, w.error_type)
        return Hashed(
            transform_string(h.transform),
            out,
            self.function_info(fn) if fn is not None else None,
            fallback,
        )

    def unhashed(self, frame: Frame) -> Hashed:
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
        fn = _function_arg(frame)
        return Hashed(
            None,
            out,
            self.function_info(fn) if fn is not None else None,
            None,
            fingerprint_given=_given_fingerprint(frame.kwargs) is not None,
        )

    def show_args(self, args: Mapping[str, ArgInfo], frame: Frame, h: HashEvent | None) -> dict[str, ArgInfo]:
        """Give every hashed argument a readable value for `lineage` (a summary where it is too
        large for a repr: `20000 ints, digest …`, a range, the features of a cast), and record
        `num_proc`, which does not enter the fingerprint but says how the step ran."""
        out = dict(args)
        values = h.args if h is not None and isinstance(h.args, Mapping) else {}
        for name, entry in args.items():
            if entry.repr is None and name in values:
                shown = describe_value(values[name], entry.digest)
                if shown is not None:
                    out[name] = dataclasses.replace(entry, repr=shown)
        num_proc = frame.kwargs.get("num_proc")
        if frame.op in ("map", "filter") and type(num_proc) is int and "num_proc" not in out:
            out["num_proc"] = self.arg_info(None, repr(num_proc), "int")
        return out

    def note_changes(self, args: dict[str, ArgInfo], h: HashEvent) -> dict[str, ArgInfo]:
        """Determinism runs: an argument whose digest at the end of a step that ran differs from
        the one datasets computed when it hashed the step was changed by the step itself (a
        tokenizer configured inside the mapped function, a vocabulary built on the first call).
        Its tree after the step goes next to the one taken at hash time, as ``"after"``."""
        values = {str(k): v for k, v in h.args.items()} if isinstance(h.args, Mapping) else {}
        out = dict(args)
        for key, entry in args.items():
            tree = entry.tree
            if entry.digest is None or not isinstance(tree, Mapping) or key not in values:
                continue
            if str(tree.get("t", "")).startswith("datasets."):
                continue  # a dataset argument: its digest follows fingerprints, not the step
            after = try_hash(values[key])
            if after is not None and after != entry.digest:
                out[key] = dataclasses.replace(entry, after=hash_tree(values[key]))
        return out

    def with_summaries(self, args: dict[str, ArgInfo], h: HashEvent) -> dict[str, ArgInfo]:
        """Bounded hash-tree summaries of the arguments of a step that computed its result (or
        fell back to a random fingerprint), for `cachetool explain`. Plain scalars and empty
        containers need none: their repr is the whole story."""
        values = h.args if isinstance(h.args, Mapping) else {}
        out = dict(args)
        for name, entry in args.items():
            r = entry.repr
            if r is not None and (entry.type in _SCALAR_TYPES or r in ("{}", "[]", "()")):
                continue
            if name in ("fingerprint_name", "new_fingerprint"):
                continue
            summary = summarize(values.get(name))
            if summary is not None:
                out[name] = dataclasses.replace(entry, summary=summary)
        return out

    def value_info(self, value: Any) -> ArgInfo:
        """A value a step's fingerprint depends on that `datasets` hashes out of sight (a
        generator builder's `gen_kwargs`, hashed into its config id): digest, repr, type, and its
        tree (determinism runs) or summary (the ledger), as for an argument."""
        info = ArgInfo(try_hash(value), safe_repr(value), type_name(value))
        if self.trees:
            return dataclasses.replace(info, tree=hash_tree(value))
        return dataclasses.replace(info, summary=summarize(value)) if self.summaries else info

    def function_info(self, fn: Any) -> FunctionInfo:
        target, code = unwrap(fn)
        key = code if code is not None else id(target)
        info = self._fn_info.get(key)
        if info is not None:
            return info
        info = FunctionInfo.parse(describe_function(fn, SOURCES))
        self._fn_info[key] = info
        return info

    def arg_info(self, digest: str | None, shown: str | None, type_: str) -> ArgInfo:
        """One `ArgInfo` per distinct value: the arguments of a pipeline's steps repeat (the same
        function, the same flags), and a frozen record part can be shared."""
        key = (digest, shown, type_)
        info = self._arg_infos.get(key)
        if info is None:
            if len(self._arg_infos) >= 4096:
                self._arg_infos.clear()
            info = self._arg_infos[key] = ArgInfo(digest, shown, type_)
        return info


def _given_fingerprint(kwargs: Mapping[str, Any]) -> str | None:
    for key in ("new_fingerprint", "train_new_fingerprint", "test_new_fingerprint"):
        if isinstance(kwargs.get(key), str):
            return str(kwargs[key])
    return None


def _function_arg(frame: Frame) -> Any:
    fn = frame.kwargs.get("function")
    if fn is None and frame.op in ("map", "filter") and len(frame.args) > 1:
        fn = frame.args[1]
    return fn if callable(fn) else None
