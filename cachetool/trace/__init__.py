"""In-process recording of `datasets` fingerprinting while a pipeline runs.

Owns the tracer (`tracer`, `calls`, `arguments`, `records`, `patches`), turning
tracing on and off (`install`: `tracing()`, `install_tracing()`), running a script under it
(`runner`, `bootstrap`: `cachetool run`), resuming a killed map (`resume`) and writing the leases
a traced process holds (`leases`; gc and verify judge them in `maintenance.liveness`). May
import `history`, `cache`, `fingerprint` and the base modules; nothing here imports `datasets`
before the script does.
"""
