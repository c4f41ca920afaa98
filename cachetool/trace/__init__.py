"""In-process recording of `datasets` fingerprinting while a pipeline runs: the tracer, turning
it on and off (`install`), `cachetool run` (`runner`), leases, resume and re-key. May import
`remote`, `history`, `cache`, `fingerprint` and the base modules; never `datasets` before the script does.
"""
