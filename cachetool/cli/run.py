"""`cachetool run`: run a pipeline script with lineage recording on."""

from __future__ import annotations

import os

import typer

from cachetool.cli.common import arg, command, opt
from cachetool.errors import CachetoolError


@command(
    # Everything after the script belongs to the script, `--help` included.
    {"allow_interspersed_args": False, "ignore_unknown_options": True},
    script=arg("The Python script to run, as you would give it to `python`.", str | None, show_default=False),
    args=arg("Arguments for the script, passed through untouched.", list[str] | None),
    module=opt(
        "-m",
        "--module",
        help="Run a module as `python -m MODULE` does (everything after it is its arguments).",
        type=str | None,
        metavar="MODULE",
    ),
    reuse_equivalent=opt(
        "--reuse-equivalent",
        help="A map about to compute under a new fingerprint takes the earlier result of its call "
        "site on the same input (same function source) once 8 sampled batches computed again "
        "equal it, instead of computing it all (see docs/resume.md).",
    ),
    once=opt(
        "--once",
        help="Compute each step once among the processes that run it on one cache: the first "
        "takes a lease on the step, the others wait for it and load its result (see docs/hosts.md).",
    ),
    remote=opt(
        "--remote",
        type=str | None,
        metavar="URL",
        help="Use this remote (s3://bucket/prefix): pull a step's result on a miss, push what "
        "computed (as CACHETOOL_REMOTE does).",
    ),
)
def run_command(
    script: str | None,
    args: list[str] | None,
    module: str | None,
    reuse_equivalent: bool,
    once: bool,
    remote: str | None,
) -> None:
    """Run a pipeline script exactly as `python script.py args...` would, recording lineage.

    The script gets the same `sys.argv`, `__main__`, `sys.path[0]` (its own folder), working
    directory, stdin/stdout, exit code and tracebacks; `num_proc` pools (fork and spawn) keep
    working. `-m MODULE` runs a module as `python -m MODULE args...` does. From its first
    `import datasets` on, every transform call (map, filter, select, shuffle, ...) is recorded in
    the ledger of the cache root it belongs to: parent and result fingerprints, arguments, the
    function and the call site, files written or reused, hit or miss. Read it back with
    `cachetool lineage`, `cachetool ls` and `cachetool show`.

    In your own code, `with cachetool.tracing(): ...` does the same.

    With a remote (`--remote s3://bucket/prefix`, or `CACHETOOL_REMOTE`), a step whose result is
    not in the local cache is looked up there first and, once checked, loaded as a cache hit;
    what a step computes is pushed (docs/remote.md).

    With `--once`, the ranks of a job that run the script together on one shared cache compute
    each step once: the first to reach a step takes a lease on its fingerprint and computes it,
    the others wait and load the result; a killed leader's step is taken over by one of them
    (`cachetool.prepare_once()` in code; docs/hosts.md).

    **Examples**

        cachetool run pipeline.py

        cachetool run train.py --epochs 3 --data ./data

        cachetool run -m mypackage.prepare --split train

        cachetool run --remote s3://team-bucket/hf-cache prepare.py

        python -m cachetool run pipeline.py

        cachetool run --reuse-equivalent pipeline.py

        srun cachetool run --once train_prep.py

    Exit codes: the script's own; 2 when the script does not exist or is a folder without
    `__main__.py`, an option before it is not one of these, or `--remote` is not a remote URL.
    """
    from cachetool.remote.client import is_remote_url
    from cachetool.trace.runner import run_script

    if remote is not None and not is_remote_url(remote):
        why = f"not a remote URL: {remote!r} (s3://bucket/prefix, gs://..., az://...)"
        raise typer.BadParameter(why, param_hint="--remote")
    reuse = reuse_equivalent
    if module is not None:
        rest = [*([script] if script is not None else []), *(args or [])]
        run_script(module, rest, module=True, reuse_equivalent=reuse, once=once, remote=remote)
    elif script is None:
        raise typer.BadParameter("give a script to run, or -m MODULE", param_hint="SCRIPT")
    elif script.startswith("-") and not os.path.exists(script):  # an option of the other commands
        why = f"no such option: {script}"
        if script.startswith("--cache-dir"):
            why += (
                "; datasets chooses where the pipeline caches: `HF_DATASETS_CACHE=DIR cachetool run "
                "SCRIPT`, or cache_dir= in the script"
            )
        raise CachetoolError(why)
    else:
        run_script(script, list(args or []), reuse_equivalent=reuse, once=once, remote=remote)
