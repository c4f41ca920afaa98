"""`cachetool remote push|pull`: a step's cache files to and from the remote tier; and what
`ls`, `verify` and `gc` print for a remote (`s3://...` in place of a cache), and `stats`' line
of what remotes served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cachetool.cli.common import CACHE_DIR, OUTPUT, REQUIRED, arg, command, opt
from cachetool.cli.output import Output, OutputFormat, hint
from cachetool.formatting import human_size

REMOTE = opt(
    "--remote",
    type=str | None,
    metavar="URL",
    help="The remote: s3://bucket/prefix (also gs://, az://). Default: CACHETOOL_REMOTE.",
)


@command(
    action=arg("push (upload) or pull (download).", default=REQUIRED, show_default=False),
    fingerprints=arg(
        "Fingerprints, unique prefixes or cache file paths (push without any: every cache file "
        "of the cache); with --saved or --to: the saved dataset's URL.",
        list[str] | None,
        show_default=False,
    ),
    remote=REMOTE,
    cache_dir=CACHE_DIR,
    saved=opt(
        "--saved",
        type=Path | None,
        metavar="DIR",
        help="push: this save_to_disk folder (a Dataset or a DatasetDict), to the URL given.",
    ),
    to=opt(
        "--to",
        type=Path | None,
        metavar="DIR",
        help="pull: the saved dataset at the URL given, into DIR (any folder; made when missing).",
    ),
    yes=opt("--yes", "-y", help="pull --to: replace what DIR holds when it is another dataset."),
    **OUTPUT,
)
def remote_command(
    action: str,
    fingerprints: list[str] | None,
    remote: str | None,
    cache_dir: Path | None,
    saved: Path | None,
    to: Path | None,
    yes: bool,
    out: Output,
) -> None:
    """Push a step's cache files to the remote, or pull them from it into this cache.

    The remote is an object store (`CACHETOOL_REMOTE=s3://bucket/prefix`, or --remote); endpoint
    and credentials come from `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
    or `~/.aws/`. Needs `pip install "cachetool[remote]"`.

    **push** uploads each file (`cache-<fp>.arrow`, or its num_proc shards) with a write-once
    put, then a producer record naming each file's size and xxh3 (signed with
    `CACHETOOL_REMOTE_KEY` when set), written last: an upload killed half-way leaves nothing a
    reader uses. Nothing on the remote is ever replaced; pushing again sends nothing.

    **pull** downloads a result, checks every size and checksum, that each file is a whole Arrow
    stream of that fingerprint, and with `CACHETOOL_REMOTE_KEY` set the record's signature; only
    then it places the files where their producer had them, under their own names, never over
    a file. `datasets` then loads them as a cache hit. A failed check places nothing.

    With a remote set, `cachetool run` does both for every step: pull on a miss, push after a
    step computed (docs/remote.md).

    **Saved datasets** (`save_to_disk` folders) live under a URL of their own: `push --saved DIR
    URL` uploads the folder (write-once, then `saved.json` naming each file's size and xxh3 and
    the `state.json` fingerprints); `pull URL --to DIR` fetches it once: when DIR holds those
    fingerprints and files already, nothing is transferred; else everything is downloaded beside
    DIR, checked, and renamed into place. DIR holding another dataset is replaced only with --yes.

    **Examples**

        export CACHETOOL_REMOTE=s3://team-bucket/hf-cache

        cachetool remote push 3f2a9c1b

        cachetool remote push                # every cache file of the cache

        cachetool remote pull 3f2a9c1b4d5e6f70 --cache-dir /scratch/hf

        cachetool ls s3://team-bucket/hf-cache

        cachetool remote push --saved ./tok s3://team-bucket/datasets/tok

        cachetool remote pull s3://team-bucket/datasets/tok --to /scratch/tok

    Exit codes: 0 pushed or pulled (or there already); 1 refused: a checksum, the Arrow stream or
    the signature failed, or other bytes stand on the remote where a file would go (nothing
    placed, nothing replaced); 2 usage (no remote, unknown fingerprint, not on the remote, the
    remote unreachable, a file larger than one put takes, a --to folder holding another dataset
    without --yes).
    """
    import typer

    from cachetool.hints import shell_command
    from cachetool.remote.transfer import pull, push

    names = list(fingerprints or ())
    if saved is not None or to is not None:
        folder = _saved_folder(action, saved, to, cache_dir)
        _saved_command(action, _saved_url(action, names, remote), folder, yes, out)
    elif yes:
        raise typer.BadParameter("--yes is for pull --to", param_hint="--yes")
    elif action == "push":
        pushed = push(names, cache_dir=cache_dir, remote=remote)
        human = not out.emit(
            lambda: {"pushed": [p.to_json() for p in pushed]}, (p.fingerprint for p in pushed)
        )
        for p in pushed:
            if human:
                if p.already:
                    out.line(f"{p.fingerprint} is already on the remote: nothing sent")
                else:
                    files = f"{len(p.files)} file{'s' if len(p.files) > 1 else ''}"
                    out.line(f"Pushed {p.fingerprint}: {files}, {human_size(p.sent)} sent")
            if p.refused:
                hint(f"{p.refused}: kept (nothing on the remote is replaced)")
            elif not p.same:
                hint(f"the remote's record of {p.fingerprint} names other files than this cache's: kept")
        if not pushed and human:
            out.line("No cache files to push.")
    elif action == "pull":
        if len(names) != 1:
            raise typer.BadParameter("pull takes one fingerprint", param_hint="FINGERPRINTS")
        got = pull(names[0], cache_dir=cache_dir, remote=remote)
        if out.emit(lambda: {"pulled": got.to_json()}, [got.fingerprint]):
            pass
        elif got.received:
            where = out.path(got.files[0].parent, out.width - 40)
            out.line(f"Pulled {got.fingerprint}: {human_size(got.received)}, checked, into {where}")
        elif not got.other_bytes:
            out.line(f"{got.fingerprint} is in the cache already: nothing received")
        for path in got.other_bytes:
            command = shell_command("verify", "--cache-dir", str(path.parent))
            hint(f"{path.name} in the cache is not the remote's: kept; to check it, run: {command}")
        folder = got.files[0].parent
        if got.received and not any((folder / n).exists() for n in ("dataset_info.json", "state.json")):
            hint(
                "its source is not prepared in this cache yet, and datasets replaces the folder when it "
                "prepares it: load the source first, or let `cachetool run --remote` pull on the miss"
            )
    else:
        raise typer.BadParameter(f"'{action}' is not push or pull", param_hint="ACTION")


def _saved_folder(action: str, saved: Path | None, to: Path | None, cache_dir: Path | None) -> Path:
    """The folder of `remote push --saved DIR` or `remote pull --to DIR` (usage errors else)."""
    import typer

    flag, folder = ("--saved", saved) if action == "push" else ("--to", to)
    if folder is None or (saved is not None and to is not None):
        raise typer.BadParameter(
            f"it goes with {action} only: push --saved DIR, pull --to DIR", param_hint=flag
        )
    if cache_dir is not None:
        raise typer.BadParameter(
            f"{flag} names the folder; a cache root is not used", param_hint="--cache-dir"
        )
    return folder


def _saved_url(action: str, names: list[str], remote: str | None) -> str:
    """The one URL of a saved dataset: the argument, else --remote (never CACHETOOL_REMOTE)."""
    import typer

    from cachetool.cli.common import is_remote

    flag = "--saved" if action == "push" else "--to"
    if len(names) > 1 or (names and not is_remote(names[0])) or (names and remote):
        raise typer.BadParameter(f"{action} {flag} takes one URL (or --remote)", param_hint="FINGERPRINTS")
    url = names[0] if names else remote
    if url is None:
        raise typer.BadParameter(f"{action} {flag} needs the dataset's URL: s3://bucket/datasets/name")
    return url


def _saved_command(action: str, url: str, folder: Path, yes: bool, out: Output) -> None:
    """`remote push --saved DIR URL` and `remote pull URL --to DIR` (`push_saved`, `pull_saved`)."""
    from cachetool.remote.saved import pull_saved, push_saved

    if action == "push":
        done = push_saved(folder, url)
        verb, none = "Pushed", f"already at {done.url}: nothing sent"
    else:
        done = pull_saved(url, folder, yes=yes)
        verb, none = "Pulled", f"in {done.folder} already: nothing received"
    key = "pushed" if action == "push" else "pulled"
    if out.emit(lambda: {key: done.to_json()}, done.fingerprints.values()):
        return
    fps = ", ".join(done.fingerprints.values())
    if not done.bytes:
        out.line(f"{fps} {none}")
        return
    where = f"to {done.url}" if action == "push" else f"checked, into {out.path(done.folder, out.width - 40)}"
    replaced = " (replacing what it held)" if done.replaced else ""
    out.line(f"{verb} {fps}: {len(done.files)} files, {human_size(done.bytes)}, {where}{replaced}")


def remote_ls(url: str, out: Output, limit: int | None) -> None:
    """`cachetool ls s3://...`: one row per fingerprint on the remote (`list_remote`)."""
    from cachetool.remote.client import remote_url
    from cachetool.remote.upkeep import list_remote

    entries = list_remote(remote_url(url))
    shown = entries[:limit] if limit is not None else entries
    if out.emit(
        lambda: {"remote": remote_url(url), "entries": [e.to_json() for e in shown]},
        (e.fingerprint for e in shown),
    ):
        return
    if not entries:
        out.line(f"Nothing on {remote_url(url)} yet.")
        _hint_remotes_below(url)
        return
    _entries_table(out, shown, "no: not used")
    files, size = sum(len(e.files) for e in entries), human_size(sum(e.size for e in entries))
    out.line(f"{len(entries)} results, {files} files, {size} on {remote_url(url)}")
    if any(not e.record for e in entries):
        hint("a result without a record is an upload stopped before its end: no reader uses it")


def remote_verify(url: str, fingerprints: list[str], deep: bool, out: Output) -> int:
    """`cachetool verify s3://... [FP...] [--deep]`: `verify_remote`, its findings, its exit code."""
    from cachetool.remote.client import remote_url
    from cachetool.remote.upkeep import verify_remote

    report = verify_remote(remote_url(url), fingerprints=fingerprints, deep=deep)
    if not out.emit(
        report.to_json, sorted({f.fingerprint for f in report.findings if f.severity == "error"})
    ):
        for f in report.findings:
            out.line(f"{f.severity}: {f}")
        errors = sum(f.severity == "error" for f in report.findings)
        warnings = len(report.findings) - errors
        how = "deep: every byte" if deep else "shallow: schema and end-of-stream marker"
        out.line(
            f"Checked {report.results} results ({report.files} files, {how}; {human_size(report.bytes_read)} "
            f"read) on {report.url}: {_count(errors, 'error')}, {_count(warnings, 'warning')}"
        )
    if not report.results and not fingerprints:
        _hint_remotes_below(url)
    return int(report.exit_code)


def _hint_remotes_below(url: str) -> None:
    """Name the remotes under `url`, which holds no result itself (`ls s3://bucket` of a remote
    at `s3://bucket/prefix`)."""
    from cachetool.remote.client import remote_url
    from cachetool.remote.upkeep import remotes_below

    below = remotes_below(remote_url(url))
    if below:
        more = f" (and {len(below) - 1} more)" if len(below) > 1 else ""
        hint(f"results are under {below[0]}{more}: name that remote")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


#: The gc options that apply to a remote (the others are for a local cache).
_REMOTE_GC = {"fingerprints", "older_than", "max_size", "min_age", "dry_run", "yes"}


def remote_gc(options: dict[str, Any], cache_dir: Path | None, out: Output) -> int:
    """`cachetool gc s3://... [--older-than D] [--max-size S] [--min-age A] [--dry-run] [-y]`:
    `plan_remote_gc`, shown, then confirmed and executed (`execute_remote_gc`)."""
    import sys

    from cachetool.cli.common import confirm
    from cachetool.errors import CachetoolError
    from cachetool.maintenance.gc import GcOptions
    from cachetool.remote.upkeep import execute_remote_gc, plan_remote_gc

    url, *rest = options["fingerprints"]
    local = [k for k, v in options.items() if v and k not in _REMOTE_GC and (k, v) != ("policy", "lru")]
    if rest or local or cache_dir is not None:
        what = "fingerprints" if rest else "--" + (local[0] if local else "cache_dir").replace("_", "-")
        raise CachetoolError(
            f"{what}: gc of a remote takes --older-than, --max-size, --min-age, --dry-run and --yes only"
        )

    # The limits read as gc reads them for a cache.
    given = {k: options[k] for k in ("older_than", "max_size", "min_age") if options.get(k) is not None}
    limits = GcOptions(**given)
    plan = plan_remote_gc(url, older_than=limits.older_than, max_size=limits.max_size, min_age=limits.min_age)
    if out.human and plan.max_size is not None and plan.size_after > plan.max_size:
        hint(
            f"{plan.url} stays over --max-size ({human_size(plan.size_after)}): what is left is "
            "uploads younger than --min-age"
        )
    if out.format == OutputFormat.json and options["dry_run"]:
        out.json({**plan.to_json(), "dry_run": True})
        return 0
    if out.human and not plan.items:
        why = [
            w
            for w, on in (
                ("nothing older than that", plan.older_than is not None),
                (f"{human_size(plan.size)}, under --max-size", plan.max_size is not None),
            )
            if on
        ]
        out.line(f"Nothing on {plan.url} to remove: {' and '.join(why)}.")
    elif out.human:
        _entries_table(out, plan.items, "no")
        out.line(f"Would remove {_count(len(plan.items), 'result')}, {human_size(plan.expected_freed)}.")
    if not plan.items or options["dry_run"]:
        return 0
    if not options["yes"]:
        interactive = out.human and sys.stdin.isatty()
        question = f"Remove {len(plan.items)} result(s), {human_size(plan.expected_freed)}?"
        if not interactive or not confirm(question):
            if interactive:
                return 0
            n = len(plan.items)
            raise CachetoolError(f"refusing to remove {n} result(s) without confirmation: pass --yes")
    result = execute_remote_gc(plan)
    hint(*(f"kept {fp}: {why}" for fp, why in result.kept))
    doc = {
        **plan.to_json(),
        "dry_run": False,
        "removed": list(result.removed),
        "freed": result.freed,
        "kept": [{"fingerprint": fp, "reason": why} for fp, why in result.kept],
    }
    if not out.emit(lambda: doc, result.removed):
        out.line(f"Removed {_count(len(result.removed), 'result')}, {human_size(result.freed)} freed.")
    return 1 if result.kept else 0


def _entries_table(out: Output, entries: Any, no_record: str) -> None:
    """One row per result on a remote: fingerprint, files, size, age, whether its record is there."""
    import time

    from cachetool.formatting import compact_age

    now = time.time()
    rows = [
        (
            e.fingerprint,
            str(len(e.files)),
            human_size(e.size),
            compact_age(now - e.modified),
            "yes" if e.record else no_record,
        )
        for e in entries
    ]
    columns = [("fingerprint", "left"), ("files", "right"), ("size", "right"), ("written", "right")]
    out.table(None, [*columns, ("record", "left")], rows, whole=("fingerprint",))


def served_lines(root: Path, since: float | None) -> tuple[dict[str, Any], list[str]]:
    """For `cachetool stats`: what remotes served into `root` (since `since`), as a JSON field
    and human lines; nothing at all when no result was pulled."""
    from cachetool.formatting import short_duration
    from cachetool.remote.transfer import served
    from cachetool.safejson import json_value

    hosts = served(root, since)
    if not hosts:
        return {}, []
    total = sum(h.bytes for h in hosts)
    lines = [
        "",
        f"Served from the remote: {_count(sum(h.results for h in hosts), 'result')}, {human_size(total)}",
    ]
    lines += [
        f"  {h.host}: {_count(h.results, 'result')}, {human_size(h.bytes)} in {short_duration(h.seconds)}"
        for h in hosts
    ]
    return {"remote_served": json_value(hosts)}, lines
