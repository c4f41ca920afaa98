"""Where `datasets` (and cachetool) keep things, resolved in the same order as `datasets` itself.

`datasets.config` reads these variables once, at import; this module reads them each time it is
called, so `cachetool dirs` always describes the environment it runs in.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cachetool.cache.roots import other_roots, user_state_dir
from cachetool.errors import CacheNotFound, CachetoolError, NotADirectory


@dataclass(frozen=True)
class Location:
    """One folder and where its value came from."""

    name: str
    path: Path
    source: str  # "--cache-dir", "HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME", "default", ...
    description: str

    @property
    def exists(self) -> bool:
        return self.path.is_dir()


def _env(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value if value else None


def resolve_cache_root(
    cache_dir: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Location:
    """The datasets cache root: `--cache-dir`, else `HF_DATASETS_CACHE`, else `HF_HOME/datasets`,
    else `XDG_CACHE_HOME/huggingface/datasets`, else `~/.cache/huggingface/datasets`."""
    env = os.environ if environ is None else environ
    desc = "datasets cache root (Arrow cache files, prepared splits, downloads)"
    if cache_dir is not None:
        return Location("datasets cache", Path(cache_dir).expanduser(), "--cache-dir", desc)
    if (value := _env(env, "HF_DATASETS_CACHE")) is not None:
        # datasets uses this variable verbatim (no `~` expansion); so do we, except for display.
        return Location("datasets cache", Path(value), "HF_DATASETS_CACHE", desc)
    home = hf_home(env)
    return Location("datasets cache", home.path / "datasets", home.source, desc)


def hf_home(environ: Mapping[str, str] | None = None) -> Location:
    """`HF_HOME`, else `XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`."""
    env = os.environ if environ is None else environ
    desc = "Hugging Face home (token, hub cache, datasets cache by default)"
    if (value := _env(env, "HF_HOME")) is not None:
        return Location("HF home", Path(os.path.expanduser(value)), "HF_HOME", desc)
    if (value := _env(env, "XDG_CACHE_HOME")) is not None:
        return Location("HF home", Path(os.path.expanduser(value)) / "huggingface", "XDG_CACHE_HOME", desc)
    return Location("HF home", Path(os.path.expanduser("~/.cache")) / "huggingface", "default", desc)


def temp_dir(environ: Mapping[str, str] | None = None) -> Location:
    """The folder `datasets` puts `hf_datasets-*` temp dirs in: `TMPDIR`, `TEMP`, `TMP`, system default."""
    env = os.environ if environ is None else environ
    desc = "hf_datasets-* folders (caching disabled) and pymp-* folders (num_proc pools)"
    for name in ("TMPDIR", "TEMP", "TMP"):
        if (value := _env(env, name)) is not None:
            return Location("temp dir", Path(os.path.normpath(value)), name, desc)
    import tempfile  # here: a listing never asks for the temp dir

    return Location("temp dir", Path(tempfile.gettempdir()), "default", desc)


def resolve_dirs(
    cache_dir: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Location, ...]:
    """Every location cachetool and `datasets` use, each with where its value came from; last,
    the other cache roots traced runs wrote in (source `registry`: saved folders, other caches)."""
    env = os.environ if environ is None else environ
    home = hf_home(env)
    root = resolve_cache_root(cache_dir, env)
    in_root = f"cache root ({root.source})"

    def overridable(variable: str, default: Location, expand_user: bool = False) -> Location:
        # The folder `variable` names when it is set: verbatim, as `datasets` reads it, or with
        # `~` expanded where the library that reads it expands it.
        value = _env(env, variable)
        if value is None:
            return default
        path = Path(os.path.expanduser(value)) if expand_user else Path(value)
        return Location(default.name, path, variable, default.description)

    downloads_dir = Location(
        "downloads", root.path / "downloads", in_root, "raw files downloaded from URLs by load_dataset"
    )
    downloads = overridable("HF_DATASETS_DOWNLOADED_DATASETS_PATH", downloads_dir)
    modules = Location("modules", home.path / "modules", home.source, "dataset loading scripts' modules")
    hub = Location(
        "hub cache",
        home.path / "hub",
        home.source,
        "raw files of Hub datasets and models; manage it with `hf cache`",
    )
    state_source = next((v for v in ("CACHETOOL_HOME", "XDG_STATE_HOME") if _env(env, v)), "default")
    return (
        root,
        downloads,
        Location(
            "extracted", downloads.path / "extracted", "downloads", "archives extracted by load_dataset"
        ),
        overridable("HF_MODULES_CACHE", modules),
        overridable("HF_HUB_CACHE", hub, expand_user=True),
        home,
        temp_dir(env),
        Location(
            "cachetool ledger",
            root.path / ".cachetool",
            in_root,
            "cachetool's records of this root, shared by its users: ledger, leases, pins, quarantine",
        ),
        Location(
            "cachetool user dir",
            user_state_dir(env),
            state_source,
            "registry of known cache roots; ledger fallback for read-only roots",
        ),
        *(
            Location(_OTHER_ROOTS[kind][0], Path(path), "registry", _OTHER_ROOTS[kind][1])
            for path, kind in other_roots(root.path, env)
            if os.path.isdir(path)
        ),
    )


#: The other roots of the registry (`cachetool.cache.roots.other_roots`), each a cache root of
#: its own: (name, description) by kind.
_OTHER_ROOTS = {
    "saved": (
        "saved folder",
        "a save_to_disk folder a traced run wrote in (a map after load_from_disk): a cache root of "
        "its own, pass it as --cache-dir",
    ),
    "cache": ("other cache", "another datasets cache a traced run wrote in: pass it as --cache-dir"),
}


def derived_dir(root: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Path | None:
    """Where cachetool keeps what it derives from the cache at `root` only to be faster next time
    (the read index, schema verdicts): the user's cache folder, `CACHETOOL_HOME/derived`, else
    `XDG_CACHE_HOME/cachetool`, else `~/.cache/cachetool`, then `roots/<device>-<inode>` of the
    root (the same cache under another path is the same). Reads never write into a root; losing
    this folder costs only time. None when the root cannot be stat'ed."""
    env = os.environ if environ is None else environ
    try:
        st = os.stat(root)
    except OSError:
        return None
    if (home := _env(env, "CACHETOOL_HOME")) is not None:
        base = Path(os.path.expanduser(home)) / "derived"
    else:
        base = Path(os.path.expanduser(_env(env, "XDG_CACHE_HOME") or "~/.cache")) / "cachetool"
    return base / "roots" / f"{st.st_dev}-{st.st_ino}"


def existing_root(path: str | os.PathLike[str] | None) -> Path:
    """The cache root to read (an explicit path, else the resolved default), checked to be a folder."""
    root = resolve_cache_root(path).path.expanduser()
    try:
        st = os.stat(root)
    except FileNotFoundError:
        if not root.is_symlink():
            raise CacheNotFound(root, default=path is None) from None
        raise NotADirectory(root) from None
    except OSError as e:
        # ENAMETOOLONG (longer than PATH_MAX), ELOOP, EACCES on the way, ...
        raise CachetoolError(f"cannot use {root} as a cache directory: {os_reason(e)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectory(root)
    return root


def os_reason(e: OSError) -> str:
    """The reason an OSError gives, in words a user reads ("path longer than the system allows")."""
    if e.errno == errno.ENAMETOOLONG:
        return "the path is longer than the system allows (PATH_MAX) or has a name that is too long"
    return e.strerror or str(e)


def enclosing_root(path: str | os.PathLike[str]) -> Path:
    """The cache root that holds `path` (a file or folder inside a cache, or a root itself).

    The default cache root when `path` lies in it; else the nearest folder from `path` up that
    holds a ledger (`.cachetool/ledger/`) or the locks `datasets` names after the root it
    works in (`<root path, / as _>_*.lock`); else the outermost of the `save_to_disk` folders
    around `path` (a DatasetDict's split belongs to the DatasetDict); else `path` itself (its
    folder, for a file). Reads a few names per folder up the path; never fails."""
    start = Path(os.path.abspath(os.path.expanduser(path)))
    here = start if start.is_dir() else start.parent
    default = Path(os.path.abspath(resolve_cache_root().path.expanduser()))
    if here == default or default in here.parents:
        return default
    saved: Path | None = None
    for folder in (here, *here.parents):
        if os.path.isdir(folder / ".cachetool" / "ledger") or _holds_root_locks(folder):
            return folder
        if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
            saved = folder
        elif saved is not None:
            break
    return saved if saved is not None else here


def _holds_root_locks(folder: Path) -> bool:
    """`datasets` leaves `<root>/<absolute builder folder, / as _>.lock` in each cache root."""
    import glob

    prefix = glob.escape(os.fspath(folder).replace("/", "_"))
    return folder != Path("/") and bool(
        glob.glob(os.path.join(glob.escape(os.fspath(folder)), prefix + "_*.lock"))
    )


def root_for(named: str | None, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cache root a command reads: `--cache-dir` when given; else, when what the user named
    (a fingerprint, prefix or path) is an existing path, the root that holds it
    (`enclosing_root`); else the default root. Checked to be a folder (`existing_root`)."""
    if cache_dir is None and named and os.path.lexists(os.path.expanduser(named)):
        return existing_root(enclosing_root(named))
    return existing_root(cache_dir)
