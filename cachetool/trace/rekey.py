"""Re-key instead of recompute (`cachetool run --reuse-equivalent`): a `map` about to compute
takes the earlier result of its call site on the same input, with the same function source and
the same row-shaping arguments, once sampled batches computed again equal it (docs/resume.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from cachetool.history.ledger import read_ledger
from cachetool.history.records.parts import Rekeyed
from cachetool.history.records.steps import StepRecord
from cachetool.trace.resume import map_call, map_rows, write_stream

#: Arguments that shape the rows a map writes: they must be the same for a result to be re-keyed.
SHAPING = (
    "batched",
    "batch_size",
    "with_indices",
    "with_rank",
    "input_columns",
    "remove_columns",
    "drop_last_batch",
    "features",
)

#: Batches run to prove the earlier result equal, and the rows of one for a map that is not batched.
SAMPLES = 8
UNBATCHED_ROWS = 1000


def rekey_map(
    map_fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    path: str,
    root: str,
    hashed: Mapping[str, Any],
    call_site: Any,
    say: Callable[[str], None],
) -> Rekeyed | None:
    """Write `path` (`cache-<fp>.arrow` of the call `map_fn(*args, **kwargs)`, which `datasets`
    hashed as `hashed`) from an equivalent earlier result proven on sampled batches; None (nothing
    written) when there is none or a sampled batch differs (then `say` tells why in one line)."""
    import datasets

    ds, call = map_call(map_fn, args, kwargs)
    if call is None or hashed.get("random_fallback"):
        return None
    folder, name = os.path.split(path)
    fp = name.removeprefix("cache-").removesuffix(".arrow")
    found = _earlier(root, fp, ds._fingerprint, hashed, call_site, datasets.__version__, folder)
    if found is None:
        return None
    rec, old = found
    where = f"map @ {os.path.basename(call_site.file or '?')}:{call_site.line}"
    workers = call["num_proc"] or 1
    if workers > 1 or not os.path.isfile(old):
        batches: tuple[int, int] | str = "a map run in num_proc workers is not re-keyed"
    else:
        batches = _proof(map_fn, ds, call, old, folder)
    if isinstance(batches, str):
        say(f"{where} not re-keyed from {rec.result}: {batches}; computing it")
        return None
    _write(old, path, fp)
    part = Rekeyed(source=rec.result, run=rec.run, batches=batches[0], rows=batches[1])
    say(f"{where}: {part.text}")
    return part


def _earlier(
    root: str, fp: str, parent: str, hashed: Mapping[str, Any], site: Any, version: str, folder: str
) -> tuple[StepRecord, str] | None:
    """The latest result the ledger of `root` records that qualifies, with its file."""
    fn = hashed.get("function")
    if fn is None or fn.qualname is None or fn.source_hash is None:
        return None
    mine = hashed.get("args", {})
    for rec in reversed(read_ledger(root).own_steps()):
        if (
            rec.operation != "map"
            or rec.internal
            or rec.result in (None, fp)
            or rec.parents != (parent,)
            or rec.error
            or rec.random_fallback is not None
            or rec.call_site is None
            or (rec.call_site.file, rec.call_site.line) != (site.file, site.line)
            or rec.versions.get("datasets") != version
        ):
            continue
        theirs = rec.function
        if theirs is None or (theirs.qualname, theirs.source_hash, theirs.deps) != (
            fn.qualname,
            fn.source_hash,
            fn.deps,
        ):
            continue
        if any(_digest(mine.get(k)) != _digest(rec.args.get(k)) for k in SHAPING):
            continue
        old = os.path.join(folder, f"cache-{rec.result}.arrow")
        shards = f"cache-{rec.result}_00000_of_"  # a num_proc map's first shard
        if os.path.isfile(old) or any(n.startswith(shards) for n in os.listdir(folder)):
            return rec, old
    return None


def _digest(info: Any) -> str | None:
    return getattr(info, "digest", None)


def _proof(
    map_fn: Callable[..., Any], ds: Any, call: dict[str, Any], old: str, folder: str
) -> tuple[int, int] | str:
    """(batches, rows) run and found equal to `old`'s rows; else why not, in words."""
    import pyarrow as pa

    n = len(ds)
    unit = call["batch_size"] if call["batched"] and call["batch_size"] else UNBATCHED_ROWS
    with pa.memory_map(old) as source:
        table = pa.ipc.open_stream(source).read_all()
        if table.num_rows != n:
            return f"it holds {table.num_rows:,} rows for {n:,} input rows"
        count = max(1, -(-n // unit))
        k = min(SAMPLES, count)
        picks = sorted({round(i * (count - 1) / max(1, k - 1)) for i in range(k)})
        rows = 0
        for i, b in enumerate(picks):
            lo, hi = b * unit, min(n, (b + 1) * unit)
            desc = f"Re-key: checking batch {i + 1} of {len(picks)}"
            got = map_rows(map_fn, ds, call, lo, hi, table.schema, folder, desc, typed=False)
            why = _differs(got, table.slice(lo, hi - lo))
            if why:
                return f"rows {lo:,}-{hi - 1:,} differ ({why})"
            rows += hi - lo
    return len(picks), rows


def _differs(got: Any, want: Any) -> str | None:
    """Why the freshly computed rows `got` are not `want`'s: other columns, another Arrow type
    (a column of nulls only excepted: a writer types it from other batches), other values."""
    import pyarrow as pa
    from datasets.table import table_cast

    if got.column_names != want.column_names:
        return f"columns {got.column_names} against {want.column_names}"
    for f in got.schema:
        w = want.schema.field(f.name).type
        if f.type != w and not pa.types.is_null(f.type):
            return f"column {f.name!r} is {f.type}, was {w}"
    try:
        cast = table_cast(got, want.schema)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None if cast.equals(want) else "other values"


def _write(old: str, path: str, fp: str) -> None:
    """`old`'s batches under the schema metadata `datasets` writes for `fp`, renamed onto `path`."""
    import pyarrow as pa

    with pa.memory_map(old) as source:
        reader = pa.ipc.open_stream(source)
        schema = reader.schema
        meta = dict(schema.metadata or {})
        info = json.loads(meta.get(b"huggingface", b"{}"))
        if "fingerprint" in info:
            info["fingerprint"] = fp
            meta[b"huggingface"] = json.dumps(info).encode()
        schema = schema.with_metadata(meta)
        write_stream(path, schema, [pa.Table.from_batches(list(reader), reader.schema).cast(schema)])
