"""Deterministic hashing the way `datasets` does it (dill + xxhash) and hash trees.

Owns: `hashing` (`hash_object`, equal to `datasets`' `Hasher.hash`), `plain` (the same for plain
values, without dill), `tree` (`build_tree`: what each part of an object contributes, the parts
being `decompose`'s), `diff`
(`diff_trees`: the part that differs between runs) and `hints` (what a culprit of each kind
usually is). Importing this package imports neither dill nor xxhash.

The bottom layer: may import only the base modules (`errors`, `formatting`, `safejson`,
`processes`, `annotations`, `hints`).
"""
