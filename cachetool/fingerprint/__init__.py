"""Hashing the way `datasets` does it (`hashing`: `hash_object`, and `hash_plain` for plain values
without dill), hash trees (`tree`: `build_tree`) and their diff (`diff`: `diff_trees`, the part
that differs and the hint for it). Importing this package imports neither dill nor xxhash.

The bottom layer: may import only the base modules.
"""
