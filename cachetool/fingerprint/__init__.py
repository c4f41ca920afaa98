"""Deterministic hashing the way `datasets` does it (dill + xxhash) and hash trees.

Owns: `hashing` (`hash_object`, equal to `datasets`' `Hasher.hash`, and `hash_plain`, the same for
plain values without dill), `tree` (`build_tree`: an object decomposed into hashed parts) and
`diff` (`diff_trees`: the part that differs between runs, and the hint for it). Importing this
package imports neither dill nor xxhash.

The bottom layer: may import only the base modules (`errors`, `formatting`, `safejson`,
`processes`, `annotations`, `hints`).
"""
