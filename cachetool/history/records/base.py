"""How records are read and written: one reader and one writer per class, compiled once from its
dataclass fields and their annotations, and `LedgerRecord`, the fields every record has."""

from __future__ import annotations

import builtins
import functools
import math
import operator
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, FrozenInstanceError, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

#: The fields of `LedgerRecord.constant_json()`: the same in every record a process writes.
CONSTANT_KEYS = ("v", "run", "host", "pid", "versions")
#: Later than this is not a time a record was written (year 5138): `datetime` cannot show it.
_MAX_TIME = 1e11

_T = TypeVar("_T")
_P = TypeVar("_P", bound="Part")
_L = TypeVar("_L", bound="LedgerRecord")
#: A field's reader: (the JSON value or None, the path of its parent as "args.fn.") -> the value.
Reader = Callable[[Any, str], Any]
#: Makes a field's default (None: the field is required).
Maker = Callable[[], Any] | None


class BadRecord(ValueError):
    """A ledger line that is JSON but not a record this cachetool can read; the message says why."""


def _field(
    name: str, default: Maker, ok: Callable[[Any], bool], what: str, convert: Reader | None = None
) -> Reader:
    """A field's reader: None -> `default()` (no default: "is missing"), a value `ok` refuses ->
    BadRecord "'where.name' is not `what`", else the value (`convert(value, where)` if given)."""

    def read(v: Any, where: str) -> Any:
        if v is None:
            if default is None:
                raise BadRecord(f"'{where}{name}' is missing")
            return default()
        if not ok(v):
            raise BadRecord(f"'{where}{name}' is not {what}")
        return v if convert is None else convert(v, where)

    return read


def _plain(hint: Any) -> Any:
    """X for `X | None`."""
    return typing.get_args(hint)[0] if isinstance(hint, types.UnionType) else hint


def _is_part(hint: Any) -> bool:
    return Part in getattr(hint, "__mro__", ())


def _list_of(kind: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(isinstance(x, kind) for x in v)


def _is_dict(v: Any) -> bool:
    return isinstance(v, dict)


def _versions(v: Any, where: str) -> Any:
    if not all(x is None or isinstance(x, str) for x in v.values()):
        raise BadRecord(f"'{where}versions' holds a value that is not a string")
    return dict(v)


def _reader(name: str, hint: Any, default: Maker) -> Reader:
    """The reader of a field annotated `hint`; `default` makes its default (None: required)."""
    if isinstance(hint, types.UnionType):  # X | None
        hint, default = _plain(hint), default or (lambda: None)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is str:  # a string default stands for "" too
        text = default() if default else None
        or_text = (lambda v, w: v or text) if text else None
        return _field(name, default, lambda v: isinstance(v, str), "a string", or_text)
    if hint is bool:
        return _field(name, default, lambda v: isinstance(v, bool), "true or false")
    if hint is int:
        return _field(name, default, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
    if hint is float:
        finite = lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)  # noqa: E731
        return _field(name, default, finite, "a finite number", lambda v, w: float(v))
    if _is_part(hint):
        return _field(name, default, _is_dict, "an object", lambda v, w: hint.parse(v, f"{w}{name}."))
    if origin is tuple and _is_part(args[0]):
        return _field(name, default, _list_of(dict), "a list of objects", _parts_list(name, args[0]))
    if origin is tuple:
        return _field(name, default, _list_of(str), "a list of strings", lambda v, w: tuple(v))
    if not _is_part(args[1]):
        return _field(name, default, _is_dict, "an object", None if args[1] is Any else _versions)
    each = _parts_map(name, args[1])

    def parts(v: Any, where: str) -> dict[str, Any]:
        for k, x in v.items():
            if not isinstance(x, dict):
                raise BadRecord(f"'{where}{name}.{k}' is not an object")
        return each(v, where)

    return _field(name, default, _is_dict, "an object", parts)


def _parts_list(name: str, part: type[Part]) -> Reader:
    """Reads a list of objects (each checked to be one already) into a tuple of `part`."""
    read = _compiled(part).read

    def each(v: Any, where: str) -> tuple[Any, ...]:
        w = f"{where}{name}."
        return tuple([_new(part, read(x, w)) for x in v])

    return each


def _parts_map(name: str, part: type[Part]) -> Reader:
    """Reads an object of objects (each checked to be one already) into a dict of `part`."""
    read = _compiled(part).read

    def each(v: Any, where: str) -> dict[str, Any]:
        w = f"{where}{name}."
        return {str(k): _new(part, read(x, f"{w}{k}.")) for k, x in v.items()}

    return each


def _inline(name: str, hint: Any, first: str, const: Callable[[Any], str]) -> tuple[str, str] | None:
    """How a class's compiled reader takes a value annotated `hint` that its type (and its items'
    types) alone shows to be right, without calling the field's reader: (the condition, `first`
    standing for the value where the condition first names it; the value read). None: the field's
    reader always reads it. `const(x)` names `x` in the compiled reader."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in (str, int, bool):
        return f"type({first}) is {hint.__name__}", "v"
    if hint is float:
        return f"type({first}) is float and v - v == 0", "v"
    if _is_part(hint):
        read = const(_compiled(hint).read)
        return f"type({first}) is dict", f"N({const(hint)}, {read}(v, where + {name + '.'!r}))"
    if origin is Mapping and args[1] is Any:
        return f"type({first}) is dict", "v"
    if origin is tuple and args[1:] == (Ellipsis,):
        item, container, items = args[0], "list", "v"
    elif origin is Mapping:
        item, container, items = args[1], "dict", "v.values()"
    else:
        return None
    if _is_part(item):
        kinds = {dict}
        value = const((_parts_list if origin is tuple else _parts_map)(name, item)) + "(v, where)"
    elif set(typing.get_args(item) or (item,)) <= {str, type(None)}:
        kinds = set(typing.get_args(item) or (item,))
        value = f"{container}(v)" if origin is Mapping else "tuple(v)"
    else:
        return None
    return f"type({first}) is {container} and {{*map(type, {items})}} <= {const(kinds)}", value


def _default(f: Field[Any]) -> Any:
    return f.default if f.default_factory is MISSING else f.default_factory()


#: Values written as they are (the common case, checked first).
_SCALARS = frozenset({str, int, float, bool, type(None)})
#: Where a part keeps its JSON object (`_json`): not a field.
_MADE = " json"
#: Where `extra` is in a class's writers: its fields go into the record (see `_write`).
_EXTRA: Any = object()


def _json(v: Any) -> Any:
    """A field's value as JSON holds it: a part as its object, a tuple as a list, and a mapping's
    parts and tuples so too; any other value (a hash tree, `extra`) as it is. A part's object is
    made once (parts are frozen; a tracer's records share their call site, function and arguments)
    and copied."""
    if isinstance(v, Part):
        made = v.__dict__.get(_MADE)
        if made is None:
            made = v.__dict__[_MADE] = v.to_json()
        return dict(made)
    if type(v) is tuple:
        return [_json(x) for x in v]
    if type(v) is dict and any(isinstance(x, (Part, tuple)) for x in v.values()):
        return {k: _json(x) for k, x in v.items()}
    return v


class _Compiled:
    """How a class is written (name, writer, the value at which the field is left out) and read:
    its reader is compiled once, at the first read; None, and a value whose type shows it right
    (`_inline`: a str, int, bool or finite float, an object for a part, a list of strings or of
    objects, ...), are taken inline, any other goes through the field's reader (which converts
    it, or raises BadRecord)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        every = fields(cls)
        #: What `_Fields.__init__` fills in: every field's name, default and default factory.
        self.names = tuple(f.name for f in every)
        self.every = frozenset(self.names)
        self.defaults = {f.name: f.default for f in every if f.default is not MISSING}
        self.factories = [(f.name, f.default_factory) for f in every if f.default_factory is not MISSING]
        self.fields = [f for f in every if f.name not in ("read_from", "extra")]
        omit = getattr(cls, "OMIT", ())
        self.writers = [(f.name, _default(f) if f.name in omit else MISSING) for f in self.fields]
        self.keys = frozenset(f.name for f in self.fields)
        if "extra" in self.every:  # a record: its unknown fields after the base ones, or last
            at = len(self.fields) if getattr(cls, "EXTRA_LAST", False) else len(CONSTANT_KEYS) + 6
            self.writers.insert(at, ("extra", _EXTRA))
        #: The writers of `to_json(constant=False)`: a tracer writes every record this way.
        self.variable = [w for w in self.writers if w[0] not in CONSTANT_KEYS]
        self.shown = [f.name for f in every if f.repr]
        self.compared = operator.attrgetter(*[f.name for f in every if f.compare], "__class__")
        self.hashed = operator.attrgetter(
            *[f.name for f in every if (f.compare if f.hash is None else f.hash)], "__class__"
        )

    @functools.cached_property
    def read(self) -> Callable[[Mapping[str, Any], str], dict[str, Any]]:
        hints = typing.get_type_hints(self.cls)  # only to read: resolving them costs ~0.2 ms a class
        readers: list[Reader] = []
        defaults: list[Any] = []
        consts: list[Any] = []
        values: list[str] = []

        def const(x: Any) -> str:
            consts.append(x)
            return f"C[{len(consts) - 1}]"

        for i, f in enumerate(self.fields):
            hint, default, custom = hints[f.name], _default(f), f.metadata.get("read")
            make = (lambda d=default: d) if f.default_factory is MISSING else f.default_factory
            readers.append(custom or _reader(f.name, hint, None if default is MISSING else make))
            defaults.append(default)
            plain = _plain(hint)
            get, slow = f"(v := d.get({f.name!r}))", f"R[{i}](v, where)"
            shared = default is not MISSING and type(default) is not dict  # a default to share
            text = plain is str and shared and default  # a string default stands for "" too
            fast = None if custom or text else _inline(f.name, plain, get, const)
            if fast is not None:
                test, value = fast
                none = f"D[{i}] if v is None else " if shared else ""
                values.append(f"{f.name!r}: {value} if {test} else {none}{slow}")
            elif shared:
                values.append(f"{f.name!r}: D[{i}] if {get} is None else {slow}")
            else:
                values.append(f"{f.name!r}: R[{i}](d.get({f.name!r}), where)")
        scope: dict[str, Any] = {"R": readers, "D": defaults, "C": consts, "N": _new}
        exec("def read(d, where):\n    return {" + ", ".join(values) + "}", scope)  # our own field names
        return scope["read"]


_COMPILED: dict[type, _Compiled] = {}


def _compiled(cls: type) -> _Compiled:
    """`cls`'s readers and writers, shared with its subclasses that add no field (`TransformRecord`)."""
    c = _COMPILED.get(cls)
    if c is None:
        own = next(k for k in cls.__mro__ if "__dataclass_fields__" in vars(k))
        c = _COMPILED[cls] = _COMPILED.get(own) or _Compiled(own)
    return c


def _write(obj: Any, constant: bool = True) -> dict[str, Any]:
    c = _compiled(type(obj))
    values = obj.__dict__
    out: dict[str, Any] = {}
    for name, omit in c.writers if constant else c.variable:
        v = values[name]
        if omit is _EXTRA:
            out.update(v)
        elif omit is MISSING or v != omit:
            out[name] = v if type(v) in _SCALARS else _json(v)
    return out


def _new(cls: type[_T], values: dict[str, Any]) -> _T:
    """An instance of the frozen dataclass `cls` holding `values`, every field read and checked
    already: no `__init__` to copy them again (about a third of the time of reading a ledger)."""
    obj = object.__new__(cls)
    object.__setattr__(obj, "__dict__", values)  # taken as it is, not copied
    return obj


class _Fields:
    """What `@dataclass(frozen=True)` would write for every record and part, from the fields of
    each class (`_compiled`), without compiling code per class (~0.3 ms a class at every import;
    a traced run pays it at start): each class is declared `@dataclass(init=False, repr=False,
    eq=False)`. Its `__init__` takes the fields by name (or, in order, by position); `__repr__`,
    `__eq__` and `__hash__` use its fields (those with `compare`, of the same class only); assigning
    or deleting any attribute raises `FrozenInstanceError`."""

    def __init__(self, *args: Any, **values: Any) -> None:
        c = _compiled(type(self))
        d = dict(c.defaults)
        if args:  # a tuple too long for the fields leaves some out: found below
            d.update(zip(c.names, args, strict=False))
        d.update(values)
        for name, make in c.factories:
            if name not in d:
                d[name] = make()
        if len(args) > len(c.names) or d.keys() != c.every:
            wrong = sorted(c.every.symmetric_difference(d)) or ["(too many positional arguments)"]
            raise TypeError(f"{type(self).__name__}: missing or unknown fields {', '.join(wrong)}")
        object.__setattr__(self, "__dict__", d)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _compiled(type(self)).shown)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _compiled(type(self)).compared
        return bool(compared(self) == compared(other))

    def __hash__(self) -> int:
        return hash(_compiled(type(self)).hashed(self))


class Part(_Fields):
    """A part of a record (a frozen dataclass): read and written by its fields; the fields named
    in `OMIT` are left out of its JSON when they hold their default."""

    OMIT: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse(cls: type[_P], d: Mapping[str, Any], where: str = "") -> _P:
        return _new(cls, _compiled(cls).read(d, where))

    def to_json(self) -> dict[str, Any]:
        return _write(self)


def _unknown(d: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {} if d.keys() <= keys else {k: v for k, v in d.items() if k not in keys}


_number_time = _reader("time", float, lambda: 0.0)


def _time(v: Any, where: str) -> float:
    if type(v) is float and 0 <= v < _MAX_TIME:  # as written: read without the number's checks
        return v
    t: float = _number_time(v, where)
    if not 0 <= t < _MAX_TIME:
        raise BadRecord("'time' is not a time since the epoch")
    return t


@dataclass(init=False, repr=False, eq=False)
class LedgerRecord(_Fields):
    """What every record has: version, type, order, time, where it ran, and the root it belongs to.

    `read_from` is the root whose ledger the record was read from (not written: it is where the
    reader found it); `extra` keeps the fields this cachetool does not know, written after the
    base fields (after all fields when `EXTRA_LAST`)."""

    TYPE: ClassVar[str] = ""
    OMIT: ClassVar[tuple[str, ...]] = ()
    EXTRA_LAST: ClassVar[bool] = False

    # in the order they are written
    type: str = ""
    seq: int = 0
    time: float = field(default=0.0, metadata={"read": _time})
    duration: float = 0.0
    internal: bool = False
    root: str | None = None
    v: int = 1
    run: str = ""
    host: str | None = None
    pid: int | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    read_from: str | None = field(default=None, compare=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "TYPE" in vars(cls):
            RECORD_TYPES[cls.TYPE] = cls

    @classmethod
    def parse(cls: builtins.type[_L], d: Mapping[str, Any], read_from: str | None = None) -> _L:
        """The record for a decoded line; unknown fields go to `extra`."""
        c = _compiled(cls)
        values = c.read(d, "")
        values["read_from"], values["extra"] = read_from, _unknown(d, c.keys)
        return _new(cls, values)

    @property
    def end(self) -> float:
        """When the call finished (seconds since the epoch)."""
        return self.time + self.duration

    @property
    def where(self) -> str:
        """The root the record belongs to (as written, else where it was read)."""
        return self.root or self.read_from or ""

    def located(self, path: str) -> str:
        """Where a path the record names is now: a path below the root it was written in lies
        below the folder its ledger was read from (the same root, moved since); any other path
        is as written."""
        if self.root and self.read_from and self.root != self.read_from:
            prefix = self.root.rstrip("/") + "/"
            if path.startswith(prefix):
                return self.read_from.rstrip("/") + "/" + path[len(prefix) :]
        return path

    def constant_json(self) -> dict[str, Any]:
        """The fields every record of one process shares (`CONSTANT_KEYS`): a writer encodes
        them once per process and writes the rest with `to_json(constant=False)`."""
        return {k: dict(self.versions) if k == "versions" else getattr(self, k) for k in CONSTANT_KEYS}

    def to_json(self, *, constant: bool = True) -> dict[str, Any]:
        """The record as written in a segment (and as `--json` outputs show it); without the
        fields of `constant_json()` when `constant` is False."""
        out = _write(self, constant)
        out["type"] = self.type or self.TYPE
        return out


#: A ledger's order: by time, then run, then the record's order within its run.
order_key = operator.attrgetter("time", "run", "seq")

#: Record type -> class (a type not listed here is skipped with a warning).
RECORD_TYPES: dict[str, type[LedgerRecord]] = {}
