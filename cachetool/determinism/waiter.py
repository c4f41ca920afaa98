"""`python -m cachetool.determinism.waiter script.py args...`: a run's interpreter started before
its turn; imports `datasets` when allowed, then waits on a pipe: one byte (`GO`) runs the traced
script, end of file exits.
"""

from __future__ import annotations

import os
import sys

#: The file descriptor this interpreter waits on.
GO_FD_ENV = "CACHETOOL_CHECK_GO_FD"
#: "1": import `datasets` while waiting (the script sets no environment variable of its own).
PREIMPORT_ENV = "CACHETOOL_CHECK_PREIMPORT"
#: The byte that starts the run.
GO = b"g"


def main() -> None:
    fd = int(os.environ.pop(GO_FD_ENV))
    if os.environ.pop(PREIMPORT_ENV, "") == "1":
        script = sys.argv[1]
        if not getattr(sys.flags, "safe_path", False):
            # Where the script's own import looks first (set again by the bootstrap), so that a
            # `datasets` folder next to the script is the one imported, as in a plain run.
            sys.path[0] = script if os.path.isdir(script) else os.path.dirname(os.path.realpath(script))
        try:
            import datasets  # noqa: F401  (the script's own import then finds it loaded)
        except Exception:  # the script's own import reports it, as in a plain run
            pass
    turn = os.read(fd, 1)
    os.close(fd)
    if turn != GO:
        raise SystemExit(0)
    from cachetool.trace.runner import _bootstrap

    _bootstrap()


if __name__ == "__main__":
    main()
