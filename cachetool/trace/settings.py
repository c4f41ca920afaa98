"""The settings the determinism runner gives a traced run, and the sequence its events share.

`cachetool check-determinism` starts each run with ``CACHETOOL_TRACE_EVENTS`` (write every event to
that file instead of the ledger), ``CACHETOOL_TRACE_TREES`` (add hash trees) and
``CACHETOOL_TRACE_COLD`` (compute every step). The bootstrap takes them out of the environment
before the script runs (`take_environment`), so the script sees the environment of a plain run;
the tracer and `cachetool.checkpoint()` read them here (`run_settings`).

Nothing here imports the rest of cachetool: `cachetool.determinism` builds on this module, never
the other way round.
"""

from __future__ import annotations

import itertools
import os

__all__ = [
    "COLD_ENV",
    "EVENTS_ENV",
    "SEED_ENV",
    "TREES_ENV",
    "event_counter",
    "run_settings",
    "take_environment",
]

EVENTS_ENV = "CACHETOOL_TRACE_EVENTS"
TREES_ENV = "CACHETOOL_TRACE_TREES"
#: Set by the determinism runner for its cold run: every transform computes (nothing is loaded
#: from the cache; what the cache lacks is written there, what it holds is left alone).
COLD_ENV = "CACHETOOL_TRACE_COLD"
#: Set by the determinism runner when it sets PYTHONHASHSEED: the user's own value ("" for none).
SEED_ENV = "CACHETOOL_USER_PYTHONHASHSEED"
_RUN_VARIABLES = (EVENTS_ENV, TREES_ENV, COLD_ENV, SEED_ENV)

#: One sequence for tracer events and `cachetool.checkpoint()` events, so that `seq` orders both.
event_counter = itertools.count()
#: The run's settings, once taken out of the environment by `take_environment()`.
_taken: dict[str, str] | None = None


def take_environment() -> None:
    """Before the script's own code runs: keep the tracer's settings here and remove the
    ``CACHETOOL_*`` variables cachetool set for the run from ``os.environ`` (and the
    ``PYTHONHASHSEED`` the determinism runner set, putting back the user's own), so the script sees
    the environment of a plain run. The user's own settings (``CACHETOOL_HOME``, ...) stay."""
    global _taken
    taken = {k: os.environ[k] for k in _RUN_VARIABLES if k in os.environ}
    if SEED_ENV in taken:
        user_seed = taken[SEED_ENV]
        if user_seed:
            os.environ["PYTHONHASHSEED"] = user_seed
        else:
            os.environ.pop("PYTHONHASHSEED", None)
    for key in _RUN_VARIABLES:
        os.environ.pop(key, None)
    _taken = taken


def _setting(name: str) -> str:
    return (_taken if _taken is not None else os.environ).get(name, "")


def run_settings() -> tuple[str, bool, bool]:
    """(events file, hash trees wanted, cold run) of this process, from the determinism runner."""
    off = ("", "0", "false", "no")
    return _setting(EVENTS_ENV), _setting(TREES_ENV) not in off, _setting(COLD_ENV) not in off
