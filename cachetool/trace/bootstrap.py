"""`python -m cachetool.trace.bootstrap script.py args...`: the command line `cachetool run`
execs, so that `ps` and `top` show the script and its arguments (see `runner._bootstrap`)."""

from __future__ import annotations

if __name__ == "__main__":
    from cachetool.trace.runner import _bootstrap

    _bootstrap()
