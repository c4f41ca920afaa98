"""`merge`: join the `--json` documents of `ls` and `verify` (`--shard i/n` jobs, one or many
hosts) into one fleet report, from the documents alone, never a cache (docs/fleet.md).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetool.cache.layout import LEFTOVER_KINDS
from cachetool.cache.shard import Shard
from cachetool.errors import CachetoolError, ExitCode
from cachetool.safejson import json_fields

#: The JSON versions merge reads.
VERSIONS = (1,)
_LEFTOVERS = frozenset(k.value for k in LEFTOVER_KINDS)
_NO_HOST = "(unknown host)"


@dataclass(frozen=True)
class Document:
    """One input: which file, which command wrote it (`ls` or `verify`), where, which shard."""

    file: str
    command: str
    host: str
    root: str
    shard: Shard
    doc: dict[str, Any] = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, skip=("doc",))


def read_document(path: str | os.PathLike[str]) -> Document:
    """The `ls --json` or `verify --json` document in `path`; anything else raises
    `CachetoolError` (exit 2) naming the file, one line."""
    name = os.fsdecode(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise CachetoolError(f"{name}: cannot read it: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CachetoolError(f"{name}: not a JSON document ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or "version" not in doc:
        raise CachetoolError(f'{name}: not a cachetool JSON document (no "version")')
    if doc["version"] not in VERSIONS:
        raise CachetoolError(
            f"{name}: JSON version {doc['version']!r}; this cachetool reads version "
            f"{', '.join(map(str, VERSIONS))} (a newer cachetool wrote it?)"
        )
    if isinstance(doc.get("entries"), list) and isinstance(doc.get("totals"), dict):
        command = "ls"
    elif isinstance(doc.get("findings"), list) and "entries_checked" in doc:
        command = "verify"
    elif isinstance(doc.get("remote"), str):  # `ls s3://... --json`, `verify s3://... --json`
        raise CachetoolError(
            f"{name}: a document of the remote {doc['remote']}: merge joins the documents of local caches "
            "(`cachetool ls --json`, `cachetool verify --json`)"
        )
    else:
        raise CachetoolError(f"{name}: not a document of `cachetool ls --json` or `cachetool verify --json`")
    shard = doc.get("shard")
    try:
        parsed = Shard(0, 1) if shard is None else Shard(int(shard["index"]), int(shard["count"]))
    except (TypeError, KeyError, ValueError):
        raise CachetoolError(f'{name}: its "shard" is not {{"index": i, "count": n}}') from None
    host = doc.get("host") or _NO_HOST
    return Document(name, command, str(host), str(doc.get("root")), parsed, doc)


@dataclass(frozen=True)
class ShardSet:
    """The documents of one command about one cache: which shards came (from which hosts), which
    did not, which came twice (counted once). Shards (`--shard i/n`, n > 1) of one root are one
    set whatever host ran each (the jobs of a SLURM array land on many nodes of one shared file
    system); whole listings (no shard) are one set per host and root."""

    command: str
    hosts: tuple[str, ...]
    root: str
    counts: tuple[int, ...]
    given: tuple[int, ...]
    missing: tuple[int, ...]
    repeated: tuple[int, ...]
    #: With shards of different counts, the count whose documents are counted (the one that
    #: covers most of the cache, the fewest shards first): the others list the same entries again.
    counted: int = 1

    @property
    def complete(self) -> bool:
        return len(self.counts) == 1 and not self.missing and not self.repeated

    def problems(self) -> list[str]:
        """What is wrong with the set, as sentences."""
        out = []
        n = self.counted
        if len(self.counts) > 1:
            out.append(
                f"shards of different counts ({', '.join(map(str, self.counts))}) do not make one set: "
                f"only those of {n} are counted"
            )
        out += [f"missing shard {i}/{n}" for i in self.missing]
        out += [f"shard {i}/{n} given twice (counted once)" for i in self.repeated]
        return out

    def to_json(self) -> dict[str, Any]:
        keys = ("command", "hosts", "root", "counts", "counted", "given", "complete", "missing", "repeated")
        return json_fields(self, *keys)


@dataclass(frozen=True)
class FleetReport:
    """What `merge` says: plain JSON-ready rows, each list in a stable order."""

    documents: tuple[Document, ...]
    shard_sets: tuple[ShardSet, ...]
    hosts: list[dict[str, Any]]
    totals: dict[str, dict[str, int]]
    duplicates: list[dict[str, Any]]
    leftovers: list[dict[str, Any]]
    counts: dict[str, int]
    problems: list[dict[str, Any]]
    differing_steps: list[dict[str, Any]]

    @property
    def exit_code(self) -> int:
        """1 when a shard set is not complete or a verify document found errors, else 0."""
        failed = any(not s.complete for s in self.shard_sets) or self.counts["error"] > 0
        return int(ExitCode.PROBLEMS_FOUND if failed else ExitCode.OK)

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)


def merge_documents(files: Sequence[str | os.PathLike[str]]) -> FleetReport:
    """`cachetool merge`: read each file (`read_document`: an `ls --json` or `verify --json`
    document, else `CachetoolError` naming it), group them into shard sets (`ShardSet`), and join
    what they say: per host, totals, duplicates across hosts, leftovers, problems, differing steps
    (docs/fleet.md). A shard given twice counts once; a missing one is reported
    (`report.exit_code` 1)."""
    if not files:
        raise CachetoolError("give the JSON files to merge (`cachetool ls --json > a.json`, ...)")
    docs = [read_document(f) for f in files]
    sets: list[ShardSet] = []
    kept: list[Document] = []
    for members in _shard_sets(docs):
        command, root = members[0].command, members[0].root
        seen: dict[Shard, Document] = {}
        repeated = set()
        for d in members:
            if d.shard in seen:
                repeated.add(d.shard.index)
            else:
                seen[d.shard] = d
        sizes = tuple(sorted({s.count for s in seen}))
        # Shards of different counts list the same entries again: count those of one count only.
        counted = max(sizes, key=lambda c: (sum(s.count == c for s in seen) / c, -c))
        kept += [d for s, d in seen.items() if s.count == counted]
        given = tuple(sorted(s.index for s in seen if s.count == counted))
        missing = tuple(i for i in range(counted) if i not in given)
        hosts = tuple(sorted({d.host for d in members}))
        sets.append(ShardSet(command, hosts, root, sizes, given, missing, tuple(sorted(repeated)), counted))
    ls = [d for d in kept if d.command == "ls"]
    verify = [d for d in kept if d.command == "verify"]
    problems, counts = _problems(ls, verify)
    return FleetReport(
        documents=tuple(docs),
        shard_sets=tuple(sets),
        hosts=_hosts(ls, verify),
        totals=_totals(d.doc for d in ls),
        duplicates=_duplicates(ls),
        leftovers=sorted(
            (
                {"host": d.host, **_pick(e, "kind", "path", "size")}
                for d in ls
                for e in _entries(d)
                if e.get("kind") in _LEFTOVERS
            ),
            key=lambda x: (x["host"], str(x["path"])),
        ),
        problems=problems,
        counts=counts,
        differing_steps=_differing_steps(ls),
    )


def _shard_sets(docs: Sequence[Document]) -> Iterable[list[Document]]:
    """The documents grouped as `ShardSet` says, in a stable order."""
    by_root: dict[tuple[str, str], list[Document]] = defaultdict(list)
    for d in docs:
        by_root[(d.command, d.root)].append(d)
    for _, members in sorted(by_root.items()):
        if any(d.shard.count > 1 for d in members):
            yield members
        else:  # whole listings: the same path on two hosts is two caches (or one seen twice)
            for host in sorted({d.host for d in members}):
                yield [d for d in members if d.host == host]


def _entries(d: Document) -> list[dict[str, Any]]:
    return [e for e in d.doc["entries"] if isinstance(e, dict)]


def _pick(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: doc.get(k) for k in keys}


def _totals(docs: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Files and bytes per kind, added up."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for doc in docs:
        for kind, t in doc["totals"].items():
            out[kind].update({"files": int(t.get("files", 0)), "bytes": int(t.get("bytes", 0))})
    return {k: {"files": v["files"], "bytes": v["bytes"]} for k, v in sorted(out.items())}


def _hosts(ls: list[Document], verify: list[Document]) -> list[dict[str, Any]]:
    """Per host: its roots, entries, files and bytes (ls), what verify checked and found."""
    hosts = sorted({d.host for d in (*ls, *verify)})
    out = []
    for host in hosts:
        mine = [d for d in ls if d.host == host]
        checked = [d for d in verify if d.host == host]
        totals = _totals(d.doc for d in mine)
        row: dict[str, Any] = {
            "host": host,
            "roots": sorted({d.root for d in (*mine, *checked)}),
            "entries": sum(len(_entries(d)) for d in mine),
            "files": sum(t["files"] for t in totals.values()),
            "bytes": sum(t["bytes"] for t in totals.values()),
        }
        for key in ("entries_checked", "files_checked", "bytes_checked"):
            row[key] = sum(int(d.doc.get(key) or 0) for d in checked)
        out.append(row)
    return out


def _duplicates(ls: list[Document]) -> list[dict[str, Any]]:
    """Fingerprints held in more than one place (host and root): where, and the bytes beyond one copy."""
    held: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for d in ls:
        for e in _entries(d):
            if e.get("fingerprint"):
                held[e["fingerprint"]][(d.host, d.root)] += int(e.get("size") or 0)
    out = []
    for fp, places in sorted(held.items()):
        if len(places) < 2:
            continue
        sizes = list(places.values())
        out.append(
            {
                "fingerprint": fp,
                "hosts": sorted({h for h, _ in places}),
                "places": [{"host": h, "root": r, "size": s} for (h, r), s in sorted(places.items())],
                "extra_bytes": sum(sizes) - max(sizes),
            }
        )
    return out


def _problems(ls: list[Document], verify: list[Document]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every problem the documents name, with its host: verify's findings, and the problems and
    warnings of listings from hosts no verify document came from; and the findings per severity."""
    rows = []
    counts: Counter[str] = Counter({"error": 0, "warning": 0, "info": 0})
    for d in verify:
        for f in d.doc["findings"]:
            counts[str(f.get("severity"))] += 1
            keys = ("severity", "entry", "kind", "path", "problem", "hint")
            rows.append({"host": d.host, "source": "verify", **_pick(f, *keys)})
    # Shards of one root make one set whatever host ran them (`ShardSet`): so does what covers them.
    verified = {(d.host, d.root) for d in verify} | {("", d.root) for d in verify if d.shard.count > 1}
    for d in ls:
        if (d.host, d.root) in verified or (d.shard.count > 1 and ("", d.root) in verified):
            continue  # verify says more of the same files
        found = [
            (e.get("id"), e.get("kind"), e.get("path"), p)
            for e in _entries(d)
            for p in e.get("problems") or ()
        ]
        found += [(None, None, w.get("path"), w.get("problem")) for w in d.doc.get("warnings") or ()]
        for entry, kind, path, problem in found:
            where = {"entry": entry, "kind": kind, "path": path, "problem": problem, "hint": ""}
            rows.append({"host": d.host, "source": "ls", "severity": "warning", **where})
    order = {"error": 0, "warning": 1, "info": 2}
    rows.sort(key=lambda r: (order.get(str(r["severity"]), 3), r["host"], str(r["path"]), str(r["problem"])))
    return rows, dict(counts)


def _differing_steps(ls: list[Document]) -> list[dict[str, Any]]:
    """Steps made from the same parent by the same operation on several hosts whose results
    differ: the same step computed elsewhere gave another fingerprint (or another step of that
    parent ran there). Matched by parent and operation: `ls --json` carries no call site."""
    made: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for d in ls:
        for e in _entries(d):
            if e.get("parent") and e.get("operation") and e.get("fingerprint"):
                made[(e["parent"], e["operation"])][d.host].add(e["fingerprint"])
    out = []
    for (parent, operation), by_host in sorted(made.items()):
        results = {frozenset(fps) for fps in by_host.values()}
        if len(by_host) > 1 and len(results) > 1:
            fps = {host: sorted(v) for host, v in sorted(by_host.items())}
            out.append({"parent": parent, "operation": operation, "fingerprints": fps})
    return out
