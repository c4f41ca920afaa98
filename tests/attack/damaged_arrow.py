"""Arrow files damaged the ways the fuzzer found crashing pyarrow (shared by the fuzz test, the
per-command test and the soak)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

FEATURES = {"id": {"dtype": "int64", "_type": "Value"}, "text": {"dtype": "string", "_type": "Value"}}


def good_stream(fingerprint: str = "0123456789abcdef", batches: int = 2) -> bytes:
    """An Arrow stream as `datasets` writes one: an int64 and a string column, the `huggingface`
    schema metadata with features and fingerprint, `batches` record batches, end-of-stream."""
    import pyarrow as pa

    batch = pa.record_batch(
        [pa.array(range(10)), pa.array([f"row {i}" for i in range(10)])], names=["id", "text"]
    )
    meta = {"huggingface": json.dumps({"info": {"features": FEATURES}, "fingerprint": fingerprint})}
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema.with_metadata(meta)) as w:
        for _ in range(batches):
            w.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def schema_length(data: bytes) -> int:
    """Bytes of the schema message (continuation, length, flatbuffer)."""
    return 8 + int.from_bytes(data[4:8], "little")


def mutations(data: bytes, seed: int, count: int) -> Iterator[bytes]:
    """`count` mutants of `data`, seeded: one to four bytes set or bit-flipped (half of them in the
    schema message), sometimes cut short."""
    rng = random.Random(seed)
    head = schema_length(data)
    for _ in range(count):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(head) if rng.random() < 0.5 else rng.randrange(len(b))
            b[pos] = rng.randrange(256) if rng.random() < 0.5 else b[pos] ^ (1 << rng.randrange(8))
        if rng.random() < 0.1:
            del b[rng.randrange(len(b)) :]
        yield bytes(b)


def wide_integer(data: bytes) -> bytes:
    """`data` with its int64 column's bit width set to 128 ("Integers with more than 64 bits")."""
    import pyarrow as pa

    for pos in range(8, schema_length(data)):
        if data[pos] != 64:
            continue
        b = data[:pos] + bytes([128]) + data[pos + 1 :]
        try:
            pa.ipc.open_stream(pa.py_buffer(b)).schema  # noqa: B018 - reading it is the test
        except pa.ArrowNotImplementedError as e:
            if "more than 64 bits" in str(e):
                return b
        except Exception:
            continue
    raise AssertionError("no bit width byte found")


def non_utf8_name(data: bytes) -> bytes:
    """`data` with the column name `text` made invalid UTF-8 (same length)."""
    at = data.index(b"\x04\x00\x00\x00text\x00", 8) + 4  # the field name (length-prefixed)
    return data[:at] + b"te\xffx" + data[at + 4 :]


def damaged_folder(root: Path) -> dict[str, Path]:
    """A builder-shaped folder in `root` holding one file of each damage, named as `datasets`
    names a derived cache file. Returns them by damage."""
    folder = root / "csv" / "default-0123456789abcdef" / "0.0.0" / ("7" * 64)
    folder.mkdir(parents=True, exist_ok=True)
    made = {
        "wide-integer": wide_integer(good_stream("00000000000000a1")),
        "non-utf8-name": non_utf8_name(good_stream("00000000000000a2")),
        "garbage": b"\xff\xff\xff\xff" + bytes(range(256)) * 4,
    }
    out = {}
    for i, (name, data) in enumerate(made.items()):
        path = folder / f"cache-00000000000000a{i + 1}.arrow"
        path.write_bytes(data)
        out[name] = path
    return out
