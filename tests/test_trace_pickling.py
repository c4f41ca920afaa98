"""Tracing never changes what pickles: every attribute the tracer replaces is pickled by dill (and
by `datasets`' own hashing pickler) exactly as the original is, so `Pool(1).apply_async(partial(
Hasher.hash, ...))` works under tracing and a function that references `datasets` internals gets
the same fingerprint traced and untraced."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

DUMPS = textwrap.dedent(
    """\
    import hashlib, json, sys, types
    import dill
    import cachetool
    from cachetool.trace.install import active_tracer
    import datasets

    def pickler_dumps(obj):
        try:
            from datasets.utils._dill import dumps
        except ImportError:  # datasets < 2.15
            from datasets.utils.py_utils import dumps
        return dumps(obj)

    def digest(dump, obj):
        try:
            return hashlib.sha256(dump(obj)).hexdigest()
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    cachetool.install_tracing()
    tracer = active_tracer()
    assert tracer is not None
    patched = [(obj, name) for obj, name, _ in tracer.patches.patches]
    def referencing(value):
        # A user function that refers to the attribute as a global: dill pickles it by value,
        # with the globals it finds by following the functions it refers to.
        return types.FunctionType((lambda: target).__code__, {"target": value, "__name__": "__main__"})

    def snapshot():
        out = {}
        for obj, name in patched:
            value = getattr(obj, name)
            out[f"{getattr(obj, '__name__', obj)}.{name}"] = [
                digest(dill.dumps, value),
                digest(lambda o: dill.dumps(o, recurse=True), value),
                digest(pickler_dumps, value),
                digest(lambda o: pickler_dumps(referencing(o)), value),
            ]
        return out
    traced = snapshot()
    from cachetool.trace.install import uninstall_tracing
    uninstall_tracing()
    print(json.dumps({"n": len(patched), "traced": traced, "plain": snapshot()}))
    """
)


def test_every_patched_attribute_pickles_as_the_original(tmp_path: Path) -> None:
    """`dill.dumps` (plain and `recurse=True`) and `datasets`' hashing pickler give the same bytes
    for each attribute the tracer replaces as for the original `datasets` attribute."""
    script = tmp_path / "dumps.py"
    script.write_text(DUMPS, encoding="utf-8")
    env = subprocess_env(tmp_path)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["n"] > 30
    differ = {k: (v, out["plain"][k]) for k, v in out["traced"].items() if v != out["plain"][k]}
    assert differ == {}


INTERNALS = textwrap.dedent(
    """\
    import json, sys
    from functools import partial
    from multiprocess import Pool
    import datasets
    from datasets import Dataset
    from datasets.fingerprint import Hasher, update_fingerprint

    def tag(ex, hasher):
        return {"h": hasher(ex["x"])}

    def uses_map(ex):
        return {"m": Dataset.map.__name__}

    def uses_update(ex):
        return {"u": update_fingerprint.__name__}

    if __name__ == "__main__":
        base = Dataset.from_dict({"x": [1, 2, 3]})
        out = {
            "pool": Pool(1).apply_async(partial(Hasher.hash, {1.5, 2.5})).get() == Hasher.hash({1.5, 2.5}),
            "hasher": base.map(partial(tag, hasher=Hasher.hash))._fingerprint,
            "map": base.map(uses_map)._fingerprint,
            "update": base.map(uses_update)._fingerprint,
            "hash_of_hash": Hasher.hash(Hasher.hash),
            "hash_of_map": Hasher.hash(Dataset.map),
        }
        print(json.dumps(out))
    """
)


def test_transforms_referencing_datasets_internals_keep_their_fingerprints(tmp_path: Path) -> None:
    """Under `cachetool run`, a `Pool(1)` call of `partial(Hasher.hash, ...)` works, and maps whose
    function references `Hasher.hash`, `Dataset.map` or `update_fingerprint` get the fingerprints a
    plain `python` run gives (no random fallback, no warning)."""
    script = tmp_path / "internals.py"
    script.write_text(INTERNALS, encoding="utf-8")
    env = subprocess_env(tmp_path)
    outs = []
    for cmd in ([sys.executable, str(script)], [sys.executable, "-m", "cachetool", "run", str(script)]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "warning" not in proc.stderr.lower(), proc.stderr
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    plain, traced = outs
    assert plain["pool"] is True
    assert traced == plain
