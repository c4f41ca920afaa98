"""Build a cache holding one CSV prepared by `datasets`, for tests that copy it.

Run as `python build_csv_cache.py OUT` with HF_DATASETS_CACHE=OUT/cache (the tests' `hf_env`
sets it): writes OUT/data.csv (600 rows: `id,text`), loads it with `load_dataset("csv")` and
prints one JSON document naming the CSV. A copy of OUT/cache in another cache root is a cache
hit for the same CSV path (`datasets` keys a local data file by its path and modification time).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from datasets import load_dataset

OUT = Path(sys.argv[1]).resolve()
csv = OUT / "data.csv"
csv.write_text("id,text\n" + "\n".join(f"{i},row {i}" for i in range(600)) + "\n")
load_dataset("csv", data_files=str(csv), split="train")
print(json.dumps({"csv": str(csv)}))
