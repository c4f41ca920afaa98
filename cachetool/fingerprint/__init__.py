"""Deterministic hashing the way `datasets` does it (dill + xxhash) and hash trees."""
