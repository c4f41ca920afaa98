"""Resume a killed map: reuse the complete record batches its killed attempt (same fingerprint)
left in a `tmp*` file, from a multiple of `batch_size`, compute the rest, and write what an
uninterrupted run writes (docs/resume.md says what is proven and how).
"""

from __future__ import annotations

import contextlib
import fcntl
import inspect
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any

from cachetool.cache.arrow import read_summary
from cachetool.history.ledger import read_ledger
from cachetool.history.records.parts import Resumed
from cachetool.history.records.steps import StepStartRecord
from cachetool.history.runs import run_state


def resume_map(
    map_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], path: str, root: str, run: str
) -> Resumed | None:
    """Write `path` (`cache-<fp>.arrow` of the call `map_fn(*args, **kwargs)` of the run `run`)
    from the killed attempt's complete batches and the rest computed now; None (nothing written)
    when there is no killed attempt to resume, or it cannot be resumed exactly."""
    folder, name = os.path.split(path)
    tmps = sorted(n for n in os.listdir(folder) if n.startswith("tmp"))
    if not tmps:  # nothing left by a killed run
        return None
    fp = name.removeprefix("cache-").removesuffix(".arrow")
    records = read_ledger(root).records
    starts = sorted(
        (r for r in records if isinstance(r, StepStartRecord) and path in r.paths), key=lambda r: r.time
    )
    ds, given = map_call(map_fn, args, kwargs)
    if given is None:
        return None
    step = given["batch_size"] if given["batched"] else 1
    if not step or step <= 0:  # one batch of everything: nothing to resume from
        return None
    # Each partial to resume: it, its run, its file, the first and the number of rows of its
    # `num_proc` worker (all rows without workers), its rank, the number of shards, its rows.
    found: list[tuple[str, Any, str, int, int, int | None, int, int]] = []
    written: dict[str, float] = {}  # each partial's last write, the end of the rows it holds
    for tmp in tmps:
        partial = os.path.join(folder, tmp)
        # Its writer: the latest run that began this step when the file was not there yet.
        owner = next((s for s in reversed(starts) if tmp not in s.before and s.run != run), None)
        if owner is None or run_state(owner) != "killed" or _held(partial):
            continue
        summary = read_summary(partial)
        with contextlib.suppress(OSError):
            written[partial] = os.stat(partial).st_mtime
        got = summary.fingerprint  # `<fp>_00001_of_00002` for a num_proc shard
        suffix = got[len(fp) :] if got and got.startswith(fp) else None
        shard = re.fullmatch(r"_(\d+)_of_(\d+)", suffix or "")
        if suffix is None or (suffix and shard is None):
            continue
        rank, shards = map(int, shard.groups()) if shard else (0, 1)
        first, count = _shard_rows(len(ds), rank, shards)
        target = path.removesuffix(".arrow") + (suffix or "") + ".arrow"
        if not os.path.exists(target):
            found.append(
                (partial, owner, target, first, count, rank if shard else None, shards, summary.rows or 0)
            )
    found = [f for f in found if _pays_off(f[6], found, path, len(ds), step, given["num_proc"])]
    reused, runs = 0, []
    spent: dict[str, float] = {}  # per killed run: the longest any of its workers spent on reused rows
    for partial, owner, target, first, count, worker, _, complete in found:
        exists = os.path.exists(target)  # (resumed from an earlier partial of the same worker)
        done = None if exists else _resume_file(map_fn, ds, given, partial, target, first, count, worker)
        if done:
            reused += done
            runs.append(owner.run)
            took = max(0.0, written.get(partial, owner.time) - owner.time) * done / max(done, complete)
            spent[owner.run] = max(spent.get(owner.run, 0.0), took)
            with contextlib.suppress(OSError):
                if not _held(partial):
                    os.unlink(partial)
    if not reused:
        return None
    # A killed run's workers computed their rows side by side: its time is its slowest worker's.
    seconds = round(sum(spent.values()), 6)
    return Resumed(rows=reused, of=len(ds), run=", ".join(dict.fromkeys(runs)), seconds=seconds)


def map_call(
    map_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, dict[str, Any] | None]:
    """(the dataset, every argument of the map call by name, defaults included); None for the
    arguments of a call whose rows may not be reused (`load_from_cache_file=False`, a coroutine)."""
    call = inspect.signature(map_fn).bind(*args, **kwargs)
    call.apply_defaults()
    given = dict(call.arguments)
    ds = given.pop("self")
    if given["load_from_cache_file"] is False or inspect.iscoroutinefunction(given["function"]):
        return ds, None
    return ds, given


def _shard_rows(rows: int, rank: int, shards: int) -> tuple[int, int]:
    """The first row and the number of rows of `datasets`' contiguous shard `rank` of `shards`."""
    size, more = divmod(rows, shards)
    return rank * size + min(rank, more), size + (rank < more)


#: How much longer than recomputing a resumed `num_proc` map may take (counted in rows): twice, so
#: that 2 workers always resume (their rests one after the other are at most both shards) and a near
#: tie spares the rerun `datasets`' pool of workers, while 8 workers killed half way (4 times) do not.
SLOWER = 2.0


def _pays_off(
    shards: int, found: list[tuple[Any, ...]], path: str, rows: int, step: int, num_proc: int | None
) -> bool:
    """Whether resuming the killed `num_proc` workers' shards (of `shards`) found in `found` takes
    at most `SLOWER` times as long as not: resumed, their rest is computed one shard after the
    other in this process, then `datasets`' workers compute the unfinished shards without a partial
    side by side; not resumed, they compute every unfinished shard side by side (a map of 8 workers
    killed half way would take 4 times as long resumed). Counted in rows, the reusable ones from
    the partials' complete batches."""
    if shards == 1:
        return True
    prefix = path.removesuffix(".arrow")
    todo = {
        r: _shard_rows(rows, r, shards)[1]
        for r in range(shards)
        if not os.path.exists(f"{prefix}_{r:05d}_of_{shards:05d}.arrow")
    }
    reusable: dict[int, int] = {}
    for _, _, _, _, count, rank, n, complete in found:
        if n == shards and rank is not None:
            done = min(complete, count) // step * step
            reusable[rank] = max(reusable.get(rank, 0), done)
    workers = max(1, min(num_proc or 1, len(todo)))
    others = [n for r, n in todo.items() if r not in reusable]
    resumed = sum(todo[r] - n for r, n in reusable.items() if r in todo)
    resumed += max(max(others, default=0), -(-sum(others) // workers))
    recomputed = max(max(todo.values(), default=0), -(-sum(todo.values()) // workers))
    return resumed <= SLOWER * recomputed


def _resume_file(
    map_fn: Callable[..., Any],
    ds: Any,
    given: dict[str, Any],
    partial: str,
    target: str,
    first: int,
    count: int,
    rank: int | None,
) -> int | None:
    """Write `target`, the map of `ds`'s rows `first` to `first + count` (by the `num_proc` worker
    `rank`), from `partial`'s reusable rows and the rest mapped now; the rows reused, or None
    (nothing written)."""
    import pyarrow as pa

    step = given["batch_size"] if given["batched"] else 1
    if not step or step <= 0:  # one batch of everything: nothing to resume from
        return None
    with pa.memory_map(partial) as source:
        reader = pa.ipc.open_stream(source)
        schema, batches = reader.schema, []
        with contextlib.suppress(pa.ArrowInvalid, OSError):  # a truncated last batch is dropped
            batches.extend(reader)
        head = pa.Table.from_batches(batches, schema)
        start = min(head.num_rows, count) // step * step
        if start == 0:
            return None
        folder = os.path.dirname(target)

        def mapped(lo: int, hi: int, desc: str) -> pa.Table:
            return map_rows(map_fn, ds, given, first + lo, first + hi, schema, folder, desc, rank)

        check = f"Resume: checking the last of {start:,} reused rows"
        if not mapped(start - step, start, check).equals(head.slice(start - step, step)):
            return None
        # The rest first: killed while it computes, this run leaves `partial` as it was.
        resumed_at = f"Map (resumed at row {first + start:,})"
        rest = mapped(start, count, resumed_at) if start < count else schema.empty_table()
        write_stream(target, schema, [head.slice(0, start), rest])
    return start


def map_rows(
    map_fn: Callable[..., Any],
    ds: Any,
    given: dict[str, Any],
    lo: int,
    hi: int,
    schema: Any,
    folder: str,
    desc: str,
    rank: int | None = None,
    typed: bool = True,
) -> Any:
    """Rows `lo` to `hi` of `ds` through the map call `given` (by the `num_proc` worker `rank`),
    typed under `schema` as the map's writer types them (`typed`; else as they come): `datasets`'
    own `map` on a `select`, written to a `tmp*` file of `folder` that is removed once mapped."""
    from datasets import Features
    from datasets.table import table_cast

    name = f"tmp{os.urandom(4).hex()}"  # removed as soon as mapped (the table maps it)
    out = os.path.join(folder, f"{name}.arrow")
    try:
        kw = {**given, "function": _as_worker(given, lo, rank), "cache_file_name": out}
        kw.update(load_from_cache_file=False, new_fingerprint=name, num_proc=None, desc=desc)
        if typed:
            kw["features"] = Features.from_arrow_schema(schema)
        res = map_fn(ds.select(range(lo, hi)), **kw)
        table = res.data.table if os.path.exists(out) else schema.empty_table()
        return table_cast(table, schema) if typed else table
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out)


def write_stream(target: str, schema: Any, tables: list[Any]) -> None:
    """`tables` as one Arrow stream under `schema`, written to a new `tmp*` file beside `target`
    (as datasets names its own) with the mode datasets gives, then renamed onto `target`."""
    import pyarrow as pa

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target))
    os.close(fd)
    try:
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for table in tables:
                writer.write_table(table)
        umask = os.umask(0o666)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _as_worker(given: dict[str, Any], offset: int, rank: int | None) -> Callable[..., Any]:
    """The map's function, called as the killed run called it on a slice starting at `offset`:
    with the indices the rows have in the whole dataset (`with_indices`) and the `num_proc`
    worker's `rank` (`with_rank`; None without workers, as `datasets` passes it)."""
    function, indices, ranked = given["function"], given["with_indices"], given["with_rank"]
    if not indices and not ranked:
        return function
    columns = given["input_columns"]
    at = 1 if columns is None or isinstance(columns, str) else len(columns)

    def as_worker(*args: Any, **kwargs: Any) -> Any:
        args_ = list(args)
        if indices:
            i = args_[at]
            args_[at] = [x + offset for x in i] if isinstance(i, list) else i + offset
        if ranked:
            args_[at + indices] = rank
        return function(*args_, **kwargs)

    return as_worker


def _held(path: str) -> bool:
    """Some process (this one included) has `path` open or memory-mapped: the kernel grants a
    write lease only on a file no one else has open. Where leases are not supported (a network
    file system), every file counts as held."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return True
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
