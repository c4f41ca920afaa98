"""The `--json` text of entries, written directly rather than through a dict and `json.dumps`
(a listing of 100,000 entries spent more time building and encoding those dicts than scanning):
`entry_json_text` (what `Entry.to_json_text()` returns), `json_bodies` / `json_body_writer` (the
entries of a listing, one-file entries through a template per shape), and the JSON texts of the
values many entries share, remembered (`shared_json`, also used for lean entries' text in
`cachetool.cache.lean`). Each text is the one `json.dumps(entry.to_json())` writes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from json.encoder import encode_basestring_ascii as _encode_ascii
from typing import TYPE_CHECKING, Any

from cachetool.cache.layout import Kind
from cachetool.formatting import iso_time

if TYPE_CHECKING:
    from cachetool.cache.model import Entry


def entry_json_text(e: Entry) -> str:
    """`json.dumps(e.to_json())` (default separators, ASCII), written directly."""
    if e.kind == Kind.TF_CACHE:  # a few, with keys of their own
        import json

        return json.dumps(e.to_json())
    files = e.files
    modified = e.modified
    rows = e.rows
    complete = e.complete
    used = modified if e.last_used is None else max(e.last_used, modified or 0.0)
    mod_iso = _js_shared(iso_time(modified))
    path = _encode_ascii(str(e.path))
    fp = e.fingerprint
    fp_text = path if fp is None else _encode_ascii(fp)
    dataset_dir = e.dataset_dir
    return (
        f'{{"id": {fp_text}, "kind": {_js_shared(e.kind._value_)}, '
        f'"fingerprint": {"null" if fp is None else fp_text}, '
        f'"aliases": {_js_list(e.aliases)}, "dataset": {_js_shared(e.dataset)}, '
        f'"dataset_dir": {"null" if dataset_dir is None else _js_shared(str(dataset_dir))}, '
        f'"split": {_js_shared(e.split)}, "content": {_js_shared(e.content)}, "path": {path}, '
        f'"files": {len(files)}, "expected_files": {_js_int(e.expected_files)}, '
        f'"rows": {_js_int(rows)}, "expected_rows": {_js_int(e.expected_rows)}, '
        f'"columns": {_js_columns(e.columns)}, "size": {e.size}, '
        f'"modified": {mod_iso}, '
        f'"used": {mod_iso if used == modified else _js(iso_time(used))}, '
        f'"complete": {"null" if complete is None else "true" if complete else "false"}, '
        f'"parent": {_js_shared(e.parent)}, "operation": {_js_shared(e.operation)}, '
        f'"unit": {_js(str(e.unit)) if e.unit else "null"}, '
        f'"problems": {_js_list(e.problems)}}}'
    )


def json_template(e: Entry) -> tuple[str, str, str, str, str, str]:
    """The text of `entry_json_text(e)` of a one-file entry around its own values: before the
    id, before the fingerprint, before the path, before the rows, before the size, and after
    `complete` (without the closing brace)."""
    dataset_dir = e.dataset_dir
    return (
        '{"id": ',
        f', "kind": {_js_shared(e.kind._value_)}, "fingerprint": ',
        f', "aliases": {_js_list(e.aliases)}, "dataset": {_js_shared(e.dataset)}, '
        f'"dataset_dir": {"null" if dataset_dir is None else _js_shared(str(dataset_dir))}, '
        f'"split": {_js_shared(e.split)}, "content": {_js_shared(e.content)}, "path": ',
        f', "files": 1, "expected_files": {_js_int(e.expected_files)}, "rows": ',
        f', "expected_rows": {_js_int(e.expected_rows)}, "columns": {_js_columns(e.columns)}, "size": ',
        f', "parent": {_js_shared(e.parent)}, "operation": {_js_shared(e.operation)}, '
        f'"unit": {_js(str(e.unit)) if e.unit else "null"}, '
        f'"problems": {_js_list(e.problems)}',
    )


#: The values an entry's JSON text shares with the other entries of its folder: entries that
#: agree on these are written through one template.
_Shape = tuple[Any, ...]


def json_bodies(entries: Iterable[Entry]) -> Iterator[str]:
    """`e.to_json_text()` of each entry without its closing brace (so a caller may add keys).
    Entries of one file (most of a cache) whose other values agree with an earlier entry's (a
    dataset folder's files share their dataset, kind, columns, parent, ...) are written through
    a template made once for those values: only their own values are formatted."""
    return map(json_body_writer(), entries)


def json_body_writer() -> Callable[[Entry], str]:
    """The function `json_bodies` applies to each entry, with its own templates: the entries it
    is given must stay alive while it is used (shared objects are told apart by identity)."""
    templates: dict[_Shape, tuple[str, str, str, str, str, str]] = {}
    tf_cache, source = Kind.TF_CACHE, Kind.SOURCE
    encode, shared, iso = _encode_ascii, _js_shared, iso_time  # looked up once, not per entry

    def body(e: Entry) -> str:
        files = e.files
        if len(files) != 1 or e.kind is tf_cache:
            return entry_json_text(e)[:-1]
        f = files[0]
        s = f.summary
        # Objects shared by entries are keyed by identity (all stay alive while this runs).
        shape = (
            e.kind,
            e.dataset,
            id(e.dataset_dir),
            e.split,
            e.content,
            e.aliases,
            e.expected_files,
            e.expected_rows,
            None if s is None else id(s.columns),
            e.parent,
            e.operation,
            id(e.unit),
            e.problems,
        )
        t = templates.get(shape)
        if t is None:
            t = templates[shape] = json_template(e)
        fp = e.fingerprint
        path = encode(str(e.path))
        fp_text = path if fp is None else encode(fp)
        if s is None:
            rows = e.expected_rows if e.kind is source else None
            complete = "null"
        else:
            rows = s.rows
            if rows is None and e.kind is source:
                rows = e.expected_rows
            ef = e.expected_files
            complete = "false" if ef is not None and ef > 1 else "true" if s.complete else "false"
        modified = f.mtime
        mod_iso = shared(iso(modified))
        last = e.last_used
        used = mod_iso if last is None or last <= modified else _js(iso(last))
        return (
            f"{t[0]}{fp_text}{t[1]}{'null' if fp is None else fp_text}{t[2]}{path}{t[3]}"
            f'{"null" if rows is None else int.__repr__(rows)}{t[4]}{f.size}, "modified": {mod_iso}, '
            f'"used": {used}, "complete": {complete}{t[5]}'
        )

    return body


def _js(text: str | None) -> str:
    """A string (or None) as `json.dumps(..., ensure_ascii=True)` writes it."""
    return "null" if text is None else _encode_ascii(text)


#: JSON texts of strings many entries share (dataset names and folders, kinds, parents, times).
_SHARED_JS: dict[str | None, str] = {None: "null"}
#: JSON texts of column-name lists (files of one dataset share their columns tuple).
_COLUMNS_JS: dict[tuple[tuple[str, str], ...], str] = {}


def _js_shared(text: str | None) -> str:
    """`_js(text)`, remembered: for values many entries of a listing share."""
    got = _SHARED_JS.get(text)
    if got is None:
        if len(_SHARED_JS) > 100_000:
            _SHARED_JS.clear()
            _SHARED_JS[None] = "null"
        got = _SHARED_JS[text] = _js(text)
    return got


def _js_columns(columns: tuple[tuple[str, str], ...]) -> str:
    got = _COLUMNS_JS.get(columns)
    if got is None:
        if len(_COLUMNS_JS) > 10_000:
            _COLUMNS_JS.clear()
        got = _COLUMNS_JS[columns] = _js_list([name for name, _ in columns])
    return got


def _js_int(n: int | None) -> str:
    return "null" if n is None else int.__repr__(n)


def _js_list(texts: Sequence[str]) -> str:
    return "[" + ", ".join(map(_encode_ascii, texts)) + "]" if texts else "[]"


shared_json = _js_shared  # for the lean entries' text (`cachetool.cache.lean`)
