"""The schema messages of a cache are decoded in Python exactly as pyarrow decodes them: the same
columns and types (the text `ls`, `show` and the read index keep), or nothing, and then pyarrow
says (so a damaged file gets the verdict it always got)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.ipc import decode_schema
from tests import forks
from tests.attack.damaged_arrow import schema_length


def _schemas() -> dict[str, Any]:
    """Schemas of every column type `datasets` writes (Value dtypes, ClassLabel, Sequence as a
    list or a fixed-size list, nested dicts, lists of dicts, LargeList, Image and Audio structs,
    timestamps with and without a time zone), and ones this module leaves to pyarrow
    (dictionaries, maps, unions, intervals, field metadata)."""
    import pyarrow as pa

    scalars = [
        pa.null(),
        pa.bool_(),
        *(
            getattr(pa, t)()
            for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
        ),
        pa.float16(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.binary(16),
        pa.binary(0),
        pa.date32(),
        pa.date64(),
        *(pa.time32(u) for u in ("s", "ms")),
        *(pa.time64(u) for u in ("us", "ns")),
        *(pa.timestamp(u) for u in ("s", "ms", "us", "ns")),
        pa.timestamp("us", tz="UTC"),
        pa.timestamp("s", tz="Europe/Paris"),
        pa.timestamp("ns", tz="+01:00"),
        *(pa.duration(u) for u in ("s", "ms", "us", "ns")),
        pa.decimal128(10, 2),
        pa.decimal128(38, 0),
        pa.decimal256(40, 5),
    ]
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    nested = pa.struct(
        [
            ("a", pa.list_(pa.int32())),
            pa.field(
                "b", pa.struct([("c", pa.float32()), ("d", pa.large_list(pa.string()))]), nullable=False
            ),
            ("e", pa.list_(pa.struct([("f", pa.int64()), ("g", pa.string())]))),
        ]
    )
    out: dict[str, Any] = {
        "values": pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(scalars)]),
        "not-null": pa.schema([pa.field(f"c{i}", t, nullable=False) for i, t in enumerate(scalars[1:])]),
        "class-label": pa.schema([("text", pa.string()), ("label", pa.int64())]),
        "sequences": pa.schema(
            [
                ("tokens", pa.list_(pa.int32())),
                ("embedding", pa.list_(pa.float32(), 768)),
                ("large", pa.large_list(pa.int64())),
                ("empty", pa.list_(pa.int8(), 0)),
                ("named", pa.list_(pa.field("element", pa.string(), nullable=False))),
                ("deep", pa.list_(pa.list_(pa.large_list(pa.list_(pa.float64(), 3))))),
            ]
        ),
        "structs": pa.schema(
            [("image", image), ("audio", audio), ("nested", nested), ("empty", pa.struct([]))]
        ),
        "no-columns": pa.schema([]),
        "odd-names": pa.schema([("", pa.int64()), ("é ü, x: y<z>", pa.string()), ("a\nb", pa.bool_())]),
        "indices": pa.schema([("indices", pa.uint64())]),
        # Left to pyarrow:
        "dictionary": pa.schema([("d", pa.dictionary(pa.int32(), pa.string()))]),
        "map": pa.schema([("m", pa.map_(pa.string(), pa.int64()))]),
        "union": pa.schema([("u", pa.sparse_union([pa.field("x", pa.int64())]))]),
        "interval": pa.schema([("i", pa.month_day_nano_interval())]),
        "field-metadata": pa.schema([pa.field("x", pa.int64(), metadata={"k": "v"})]),
    }
    meta = {"huggingface": json.dumps({"info": {"features": {}}, "fingerprint": "0123456789abcdef"})}
    for name in list(out):
        out[name + "+metadata"] = out[name].with_metadata(meta)
    return out


def _message(schema: Any) -> bytes:
    """The schema message a stream of `schema` starts with (its 8-byte prefix included)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema):
        pass
    data = sink.getvalue().to_pybytes()
    return data[: schema_length(data)]


def _pyarrow(message: bytes) -> Any:
    """What pyarrow reads in a schema message: (columns, the node index of each column in a
    record batch, the node count of a batch), or None where it refuses the message."""
    import pyarrow as pa

    def nodes(t: Any) -> int:
        return 1 + sum(nodes(t.field(i).type) for i in range(t.num_fields))

    try:
        schema = pa.ipc.read_schema(pa.py_buffer(message))
        counts = [nodes(f.type) for f in schema]
        columns = tuple((f.name, str(f.type)) for f in schema)
    except Exception:  # pyarrow refuses it (ArrowException, UnicodeDecodeError, ...)
        return None
    return columns, tuple(sum(counts[:i]) for i in range(len(counts))), sum(counts)


LEFT_TO_PYARROW = ("dictionary", "map", "union", "interval", "field-metadata")


def test_every_column_type_a_cache_holds_is_decoded_as_pyarrow_decodes_it() -> None:
    """Each schema of the types `datasets` writes is decoded without pyarrow, to the very text
    pyarrow gives; the others are left to pyarrow."""
    for name, schema in _schemas().items():
        message = _message(schema)
        if name.split("+")[0] in LEFT_TO_PYARROW:
            assert decode_schema(message) is None, name
        else:
            assert decode_schema(message) == _pyarrow(message), name


def test_damaged_schema_messages_are_decoded_as_pyarrow_decodes_them_or_left_to_it() -> None:
    """Thousands of seeded mutants of schema messages of every type (bytes set or bit-flipped,
    bytes cut or added before the prefix's length is fixed up): each decodes to what pyarrow
    gives, or is left to pyarrow; never a different answer, never accepted where pyarrow
    refuses. Among them are mutants pyarrow refuses and mutants decoded to other types, so the
    comparison can fail."""
    rng = random.Random(20261124)
    refused = changed = decoded = 0
    for name, schema in _schemas().items():
        good = _message(schema)
        expected = _pyarrow(good)
        for _ in range(400):
            b = bytearray(good)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(8, len(b))
                b[pos] = rng.randrange(256) if rng.random() < 0.5 else b[pos] ^ (1 << rng.randrange(8))
            if rng.random() < 0.1:
                at = rng.randrange(8, len(b))
                b[at:at] = bytes(rng.randrange(1, 9)) if rng.random() < 0.5 else b""
                if rng.random() < 0.5:
                    del b[rng.randrange(8, len(b)) :]
                b[4:8] = (len(b) - 8).to_bytes(4, "little")
            mutant = bytes(b)
            ours, theirs = decode_schema(mutant), _pyarrow(mutant)
            assert ours is None or ours == theirs, (name, mutant.hex())
            refused += theirs is None
            decoded += ours is not None
            changed += ours is not None and ours != expected
    assert refused > 5000 and decoded > 500 and changed > 50, (refused, decoded, changed)


@pytest.mark.slow
def test_every_schema_of_the_real_cache_is_decoded_as_pyarrow_decodes_it(real_cache: dict[str, Any]) -> None:
    """Every Arrow file `datasets` wrote in the test cache: its schema message decodes without
    pyarrow, to what pyarrow gives (nothing for files that hold no schema)."""
    files = [
        p for p in sorted(Path(real_cache["cache"]).rglob("*.arrow")) if p.is_file() and not p.is_symlink()
    ]
    decoded = 0
    for path in files:
        data = path.read_bytes()
        message = data[: schema_length(data)]
        theirs = _pyarrow(message)  # None for an empty file a killed writer left
        assert decode_schema(message) == theirs, path
        decoded += theirs is not None
    assert decoded > 10


_FEATURES = """
import json, sys
from datasets import Array2D, Audio, ClassLabel, Features, Image, LargeList, Sequence, Translation, Value
from datasets import TranslationVariableLanguages
features = Features({
    "label": ClassLabel(names=["neg", "pos"]),
    "tokens": Sequence(Value("int32")),
    "fixed": Sequence(Value("float32"), length=4),
    "large": LargeList(Value("string")),
    "nested": {"a": Value("int8"), "b": [{"c": Value("timestamp[ms, tz=UTC]"), "d": Value("date32")}]},
    "seq_of_dict": Sequence({"x": Value("float64"), "y": Sequence(Value("large_string"))}),
    "image": Image(),
    "audio": Audio(),
    "translation": Translation(languages=["en", "fr"]),
    "variable": TranslationVariableLanguages(languages=["en", "fr"]),
    "decimal": Value("decimal128(12, 3)"),
    "duration": Value("duration[us]"),
    "time": Value("time64[ns]"),
    "binary": Value("binary"),
    "array": Array2D(shape=(2, 3), dtype="int32"),
})
sys.stdout.buffer.write(features.arrow_schema.serialize().to_pybytes())
"""


@pytest.mark.slow
def test_the_schemas_datasets_features_make_are_decoded_as_pyarrow_decodes_them(tmp_path: Path) -> None:
    """The schema `datasets` writes for features of every kind (ClassLabel, Sequence, LargeList,
    nested dicts and lists of dicts, Image, Audio, Translation, timestamps, decimals; Array2D is
    an extension type, left to pyarrow): each column decodes as pyarrow decodes it."""
    import pyarrow as pa

    message = forks.run(
        [sys.executable, "-c", _FEATURES], capture_output=True, check=True, preload=forks.PIPELINE
    ).stdout
    schema = pa.ipc.read_schema(pa.py_buffer(message))
    assert len(schema) == 15 and schema.metadata and b"huggingface" in schema.metadata
    assert decode_schema(message) is None  # the Array2D column's extension metadata
    for i in range(len(schema) - 1):
        one = _message(pa.schema([schema.field(i)]).with_metadata(schema.metadata))
        assert decode_schema(one) == _pyarrow(one) != None, schema.field(i)  # noqa: E711


def test_metadata_values_of_a_remembered_form_read_as_json_reads_them() -> None:
    """The `huggingface` metadata value of a dataset's files differs only in the fingerprint, so
    a form remembered from one file reads the others without parsing them: every value (other
    fingerprints, damaged bytes, a fingerprint escaped, twice there, nested, a key twice) reads
    to the fingerprint and text `json.loads` gives, with forms remembered or not."""
    from cachetool.cache import ipc

    features = {"id": {"dtype": "int64", "_type": "Value"}, "text": {"dtype": "string", "_type": "Value"}}
    fp = "0123456789abcdef"
    values = [
        json.dumps({"info": {"features": features}, "fingerprint": fp}),
        json.dumps({"fingerprint": fp, "info": {"description": "é", "features": features}}),
        json.dumps({"fingerprint": fp}, indent=2),
        '{"fingerprint": "\\u0051qQ", "x": "QqQ"}',  # the fingerprint escaped; a plain copy elsewhere
        '{"fingerprint": "ZzZzZ", "y": "\\u005azZzZ"}',
        json.dumps({"info": {"fingerprint": fp}, "fingerprint": fp}),  # twice
        '{"fingerprint": "' + fp + '", "fingerprint": "other"}',  # a key twice: json takes the last
        json.dumps({"info": {"fingerprint": fp}}),  # only nested
        json.dumps([{"fingerprint": fp}]),
        '{"a": 1' + fp[:0] + "}",
    ]
    rng = random.Random(20261124)
    others = ["fedcba9876543210", "1", "a" * 40, "x.y-z_0", 'q"q', "q\\q", "é", "", "0123456789abcdef"]
    mutants = []
    for value in values:
        raw = value.encode()
        mutants.append(raw)
        for other in others:
            mutants.append(raw.replace(fp.encode(), other.encode()))
        for _ in range(300):
            b = bytearray(raw.replace(fp.encode(), rng.choice(others).encode()))
            for _ in range(rng.randint(1, 2)):
                if b:
                    pos = rng.randrange(len(b))
                    b[pos] = (
                        rng.choice(b'"\\{}[],: 0aQZ\x00\xff') if rng.random() < 0.5 else rng.randrange(256)
                    )
            mutants.append(bytes(b))
    ipc._HF_FORMS.clear()
    fresh = [ipc._parse_hf_json(m) for m in mutants]
    for raw in (v.encode() for v in values):
        ipc.parse_hf_metadata(raw)
    # The three plain ones, the one whose copy elsewhere is escaped and the last of a key twice:
    # never the escaped fingerprint (a plain copy elsewhere) or one that is there twice.
    assert len(ipc._HF_FORMS) == 5
    assert not any(b'"x": "' in head for head, _ in ipc._HF_FORMS)
    hits = 0
    for m, expected in zip(mutants, fresh, strict=True):
        forms = list(ipc._HF_FORMS)
        assert ipc.parse_hf_metadata(m) == expected, m
        hits += forms == ipc._HF_FORMS and expected[0] is not None
    assert hits > 100


def test_a_size_hint_that_no_longer_holds_reads_the_file_as_it_is(tmp_path: Path) -> None:
    """A listing hands the size its `stat` saw; a file that grew, shrank, emptied or was damaged
    since reads as it reads without the hint."""
    from cachetool.cache.arrow import read_summary
    from tests.attack.damaged_arrow import good_stream

    path = tmp_path / "cache-0123456789abcdef.arrow"
    good = good_stream()
    for data in (good, good[:-8], good + b"\0" * 8, b"", good[:100], b"x" * len(good)):
        path.write_bytes(data)
        plain = read_summary(path)
        for hint in (len(good), len(good) - 8, len(good) + 8, 1, 100, 1 << 21):
            assert read_summary(path, hint) == plain, (len(data), hint)


_LIST_WITHOUT_PYARROW = """
import sys
from cachetool.cache import arrow
from cachetool.cache.scan import scan_cache

plain = arrow._walk
asked = []
arrow._walk = lambda mm, size: asked.append(plain(mm, size).error) or plain(mm, size)
scan = scan_cache(sys.argv[1], use_index=False)
print(len(scan.entries), "pyarrow" in sys.modules, len(asked), all(asked))
"""


@pytest.mark.slow
def test_a_cold_listing_imports_pyarrow_only_for_a_damaged_file(real_cache: dict[str, Any]) -> None:
    """A cold listing of the test cache (every kind of entry `datasets` writes) reads the headers
    of every whole file without pyarrow (46 MB of a listing's peak memory): only the one file a
    killed writer cut short is read by pyarrow, which names the damage."""
    out = subprocess.run(
        [sys.executable, "-c", _LIST_WITHOUT_PYARROW, real_cache["cache"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert int(out[0]) > 10 and out[1:] == ["True", "1", "True"], out
