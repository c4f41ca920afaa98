"""The preprocessing function is written to a per-run file (a name with a run id) and imported.

datasets issue #2496 (fingerprints follow paths): dill keeps a function's file name in its code, so
the same function from another file name hashes differently on every run.
"""

import importlib.util
import os
import tempfile
import uuid

from corpus_data import splits

SOURCE = "def clean(example):\n    return {'text': example['text'].strip().lower()}\n"
path = os.path.join(tempfile.mkdtemp(), f"prep_{uuid.uuid4().hex[:8]}.py")
with open(path, "w") as f:
    f.write(SOURCE)
spec = importlib.util.spec_from_file_location("prep", path)
prep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prep)

ds = splits("l05")["train"]
ds = ds.map(prep.clean)
print(ds._fingerprint)
