"""Domain exceptions and the exit codes they map to (at the process boundary,
`cachetool.cli.output.report_exception`: one `Error: ...` line on stderr)."""

from __future__ import annotations

import os
from enum import IntEnum

TYPE_CHECKING = False
if TYPE_CHECKING:  # `cachetool run`'s launcher imports this module: no pathlib, no collections
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any


class ExitCode(IntEnum):
    """Exit codes shared by every command (the table: docs/exit-codes.md)."""

    OK = 0
    #: verify found errors; check-determinism found a differing fingerprint.
    PROBLEMS_FOUND = 1
    #: bad options or arguments, a missing cache directory, an unknown or ambiguous fingerprint.
    USAGE = 2
    #: check-determinism: every fingerprint matched but `datasets` fell back to a random one.
    RANDOM_FINGERPRINT = 3
    #: interrupted by Ctrl-C.
    INTERRUPTED = 130


class CachetoolError(Exception):
    """Base class of the errors a user can cause; the message is one line."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CacheNotFound(CachetoolError):
    """The cache directory (or the PATH given instead) does not exist. `default`: it is the
    default root (no `--cache-dir` or PATH given), which `datasets` makes when it first caches
    something: nothing is cached yet."""

    def __init__(self, root: Path, default: bool = False) -> None:
        if default:
            super().__init__(f"nothing cached yet: {root} does not exist (datasets makes it on first use)")
        else:
            super().__init__(f"cache directory not found: {root}")
        self.root = root
        self.default = default


class NotADirectory(CachetoolError):
    """A path given as a cache directory is a file."""

    def __init__(self, root: Path) -> None:
        super().__init__(f"not a directory: {root}")
        self.root = root


class UnknownFingerprint(CachetoolError):
    """No entry has this fingerprint (or fingerprint prefix)."""

    def __init__(self, prefix: str, root: Path, unread: Sequence[Path] = ()) -> None:
        elsewhere = _root_of_path_outside(prefix, root)
        if elsewhere is not None:
            message = (
                f"{prefix} is not in the cache {root}: a save_to_disk folder is a cache root of its "
                f"own, pass --cache-dir {elsewhere}"
            )
            if os.path.isfile(os.path.join(prefix, "dataset_dict.json")):
                splits = sorted(
                    e.name for e in os.scandir(prefix) if os.path.isfile(os.path.join(e.path, "state.json"))
                )
                message += f" and name one of its splits ({', '.join(splits)})"
        else:
            message = f"no cache entry matches '{prefix}' in {root}"
            if unread:  # folders of another user (umask 077): what it names may be there
                more = f" and {len(unread) - 1} other folder(s)" if len(unread) > 1 else ""
                message += f" (this user may not read {os.fsdecode(unread[0])}{more})"
        super().__init__(message)
        self.prefix = prefix
        self.root = root


class NoFingerprint(UnknownFingerprint):
    """The entry at a path has no fingerprint to name it by (a lock, a tmp file)."""

    def __init__(self, path: str, root: Path, kind: str) -> None:
        CachetoolError.__init__(self, f"{path} is a {kind} entry: it has no fingerprint")
        self.prefix = path
        self.root = root


def _root_of_path_outside(name: str, root: Path) -> str | None:
    """For a name that is a saved dataset's path outside `root`: the folder to pass as
    `--cache-dir` (its DatasetDict's folder, where a traced run keeps the ledger, else the saved
    dataset's own folder). None for anything else."""
    if os.sep not in name or not os.path.exists(name):
        return None
    path = os.path.abspath(name)
    try:
        if os.path.commonpath([path, os.path.abspath(root)]) == os.path.abspath(root):
            return None
    except ValueError:  # different drives
        pass
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    for probe in (os.path.dirname(folder), folder):  # a split's DatasetDict first: its ledger
        if os.path.isfile(os.path.join(probe, "dataset_dict.json")):
            return probe
    if os.path.isfile(os.path.join(folder, "state.json")) or os.path.isdir(
        os.path.join(folder, ".cachetool", "ledger")
    ):
        return folder
    return None


class RecordedOnly(UnknownFingerprint):
    """The fingerprint is known to the ledger only: no cache file holds it (now)."""

    def __init__(self, fingerprint: str, root: Path) -> None:
        CachetoolError.__init__(
            self,
            f"no cache entry holds {fingerprint} in {root}: only the ledger records it (its files "
            f"were removed, or it never had any); `cachetool lineage {fingerprint}` shows its steps",
        )
        self.prefix = fingerprint
        self.root = root


class InAnotherRoot(UnknownFingerprint):
    """No entry of this root matches the name; the ledger of another known root records it (a
    `save_to_disk` folder, a folder a map wrote its `cache_file_name=` in, another cache)."""

    def __init__(self, prefix: str, root: Path, others: Sequence[str], command: str) -> None:
        from cachetool.hints import shell_command  # the launcher imports this module

        first = others[0]
        more = f" (and {len(others) - 1} more root(s))" if len(others) > 1 else ""
        run = shell_command(command, prefix, "--cache-dir", first)
        CachetoolError.__init__(
            self,
            f"no cache entry matches '{prefix}' in {root}; {first}, a cache root of its own, records "
            f"it{more}: `{run}`",
        )
        self.prefix = prefix
        self.root = root
        self.others = tuple(others)


class AmbiguousFingerprint(CachetoolError):
    """A fingerprint prefix matches more than one entry."""

    #: Candidates listed, one per line; the rest are counted.
    MAX_SHOWN = 8

    def __init__(self, prefix: str, matches: Sequence[str]) -> None:
        n = len(matches)
        lines = [
            f"'{prefix}' is ambiguous: it matches {n} entries (name one by a longer prefix or its path):"
        ]
        lines += [f"  {m}" for m in matches[: self.MAX_SHOWN]]
        if len(matches) > self.MAX_SHOWN:
            lines.append(f"  ... and {len(matches) - self.MAX_SHOWN} more")
        super().__init__("\n".join(lines))
        self.prefix = prefix
        self.matches = tuple(matches)


class BadExpression(CachetoolError):
    """A `--filter` or `--sort` expression that cannot be parsed."""

    def __init__(self, option: str, expression: str, reason: str) -> None:
        super().__init__(f"invalid {option} '{expression}': {reason}")
        self.option = option
        self.expression = expression


class MissingDependency(CachetoolError):
    """An optional dependency (such as `datasets`) is needed for this command."""

    def __init__(self, package: str, hint: str) -> None:
        super().__init__(f"{package} is not installed; {hint}")
        self.package = package


def option(
    default: Any,
    help: str,
    *flags: str,
    argument: bool = False,
    keyword: str | None = None,
    type: Any = None,
    cli_default: Any = None,
    parse: str | None = None,
    accepts: str | None = None,
    **cli: Any,
) -> Any:
    """A field of a command's options dataclass (`GcOptions`, `VerifyOptions`, ...): the one
    declaration of the option for the command, its Python function and the docs. `default` is
    the field's; the command's `--help` says `help`; `flags` default to `--keyword` (the field's
    name unless `keyword` says otherwise), or it is the command's `argument`; `type` and
    `cli_default` are the command line's when not the field's; `parse` says how a string value is
    read ("duration", "size"); `accepts`: the values Python may give, when more than the field's
    type (the keyword's annotation); `cli`: Typer's other keywords (`min`, `metavar`, ...)."""
    from dataclasses import MISSING, field

    m = {"help": help, "flags": flags, "argument": argument, "keyword": keyword, "type": type}
    m |= {"cli_default": cli_default, "parse": parse, "accepts": accepts, "cli": cli}
    return field(metadata=m) if default is MISSING else field(default=default, metadata=m)
