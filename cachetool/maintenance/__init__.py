"""Keeping a cache tidy and whole: `gc`, `verify`, `pin`/`unpin`, who is using a file
(`liveness`: `/proc`, leases, file locks, shared file systems), and `fleet` (`merge`: the
`ls`/`verify` documents of many jobs or hosts joined).

May import `trace`, `history`, `cache`, `fingerprint` and the base modules; not `cli`,
`determinism` or `report`, which call it. Here: what the options of its commands share.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import Field, fields
from typing import Any, TypeVar

_Options = TypeVar("_Options")


def option_keyword(f: Field[Any]) -> str:
    """The keyword (and, dashed, the `--flag`) of a field of an options dataclass."""
    return f.metadata["keyword"] or f.name


def options_of(cls: type[_Options], skip: tuple[str, ...] = (), /, **keywords: Any) -> _Options:
    """`cls` made from its option keywords but `skip`; another keyword is a TypeError."""
    names = {option_keyword(f): f.name for f in fields(cls) if f.name not in skip}  # type: ignore[arg-type]
    unknown = sorted(set(keywords) - set(names))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    return cls(**{names[k]: v for k, v in keywords.items()})


def keyword_signature(func: Callable[..., Any], cls: type, skip: tuple[str, ...] = ()) -> inspect.Signature:
    """`func(..., **options)`'s signature with the option keywords of `cls` in place of `**options`."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())[:-1]
    taken = {p.name for p in params} | set(skip)
    keywords = [
        inspect.Parameter(
            option_keyword(f),
            inspect.Parameter.KEYWORD_ONLY,
            default=f.default,
            annotation=f.metadata["accepts"]
            or (f"str | {f.type}" if f.metadata["parse"] or f.metadata["type"] else f.type),
        )
        for f in fields(cls)
        if f.name not in taken
    ]
    own = [p for p in params if p.kind == p.KEYWORD_ONLY]
    return sig.replace(parameters=[*(p for p in params if p not in own), *keywords, *own])
