"""In-process recording of `datasets` fingerprinting while a pipeline runs.

Owns the tracer (`tracer`, `calls`, `arguments`, `records`, `patches`), turning
tracing on and off (`install`: `tracing()`, `install_tracing()`), running a script under it
(`runner`, `bootstrap`: `cachetool run`) and the leases a traced process holds and gc and verify
judge (`leases`). May import `history`, `cache`, `fingerprint` and the base modules; nothing here
imports `datasets` before the script does.
"""
