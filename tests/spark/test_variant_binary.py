"""The column-wise Variant encoder and decoder (format/variant_binary.py) against PySpark's own,
on random JSON documents: the same bytes as `VariantUtils.parse_json`, the same text as
`VariantUtils.to_json`; rows they leave to the per-row path are only the documented ones."""

from __future__ import annotations

import json
import random
import re
import struct

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.variant_utils import VariantUtils  # in every supported PySpark (4.0 to 4.3)

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.variant_binary import EMPTY_METADATA, json_to_variant, variant_to_json

_NUMBERS = ["0", "1", "-1", "127", "128", "-128", "-129", "32767", "32768", "-32769", str(2**31 - 1), str(2**31),
            str(-2**31 - 1), str(2**63 - 1), str(-2**63), str(2**63), str(-2**63 - 1), str(10**30), str(10**38 - 1),
            str(10**38), "1e5", "-2.5E-3", "1e400", "0e0", "1.7976931348623157e308", "5e-324", "-0.0", "-0", "0.000",
            "12345678901234567890.5", "0.0000000001", "-123456789.123456789", "3.14"]
_CHARS = ["é", "中", "😀", "a", "b", '"', "\\", "\n", "\t", "\x01", "\x7f", "/"]


def _number(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.4:
        return rng.choice(_NUMBERS)
    if r < 0.6:
        return str(rng.randint(-10**6, 10**6))
    if r < 0.8:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 11)))
        return rng.choice(["", "-"]) + str(rng.randint(0, 10**rng.randint(0, 6))) + "." + digits
    return repr(rng.uniform(-1e10, 1e10))


def _string(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return "".join(rng.choice("abcxyz") for _ in range(rng.randint(0, 10)))
    if r < 0.7:
        return "x" * rng.randint(60, 130)  # around the short string limit, 63 bytes
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 40)))


def _document(rng: random.Random, depth: int = 0) -> str:
    r = rng.random() * (0.45 if depth > 3 else 1.0)
    if r < 0.2:
        return _number(rng)
    if r < 0.35:
        return json.dumps(_string(rng), ensure_ascii=rng.random() < 0.5)
    if r < 0.45:
        return rng.choice(["true", "false", "null"])
    if r < 0.7:
        width = 300 if depth == 0 and rng.random() < 0.05 else 8
        keys = list(dict.fromkeys(_string(rng)[:8] + str(rng.randint(0, 5)) for _ in range(rng.randint(0, width))))
        return "{" + ", ".join(json.dumps(k, ensure_ascii=rng.random() < 0.5) + ": " + _document(rng, depth + 1)
                               for k in keys) + "}"
    width = 300 if depth == 0 and rng.random() < 0.05 else 6
    return "[ " + ",".join(_document(rng, depth + 1) for _ in range(rng.randint(0, width))) + "]"


@pytest.fixture(scope="module")
def documents() -> list[str]:
    rng = random.Random(20240611)
    return [_document(rng) for _ in range(1500)] + ["  {}  ", "[]", '{"a":{}}', "[[],{}]", '{"k": [1, {"k": 2}]}']


def test_encoder_gives_pysparks_bytes(documents: list[str]) -> None:
    texts = documents + [None, "NaN", '{"a":1,"a":2}', '"\\ud800"', "1.", "01", "[1,]", '{"a":1} x', ""]
    values, metadata, fallback = json_to_variant(pa.array(texts, pa.string()))
    got = list(zip(values.to_pylist(), metadata.to_pylist(), strict=True))
    for row, text in enumerate(documents):
        assert not fallback[row], text
        assert got[row] == VariantUtils.parse_json(text), text
    assert got[len(documents)] == (b"", EMPTY_METADATA) and not fallback[len(documents)]
    # NaN, a key twice, a lone surrogate and what json.loads refuses are left to the per-row path.
    assert fallback[len(documents) + 1:].all()


def test_decoder_prints_pysparks_text(documents: list[str]) -> None:
    from spark_mergetree.spark.variant import _json_utils

    pairs = [VariantUtils.parse_json(text) for text in documents]
    floats = [0.1, 1e10, 3.4e38, 1e-5, 16777216.0, 0.0, -0.0, float("nan"), 123456.7, 1e6, 999999.94, 1e-4]
    doubles = [float("nan"), float("-inf"), 1e15, 1e16, 1e-5, 100.0, -0.0, 5e-324, 2.5e-05, 1 / 3, -1.5e300]
    pairs += [(bytes([14 << 2]) + struct.pack("<f", x), EMPTY_METADATA) for x in floats]
    pairs += [(bytes([7 << 2]) + struct.pack("<d", x), EMPTY_METADATA) for x in doubles]
    pairs += [(bytes([8 << 2, scale]) + struct.pack("<i", u), EMPTY_METADATA)
              for scale in range(10) for u in (0, 7, -15, 999999999)]
    pairs += [(bytes([9 << 2, scale]) + struct.pack("<q", u), EMPTY_METADATA)
              for scale in range(19) for u in (0, -3, 10**17 + 1)]
    date = (bytes([11 << 2]) + struct.pack("<i", 19000), EMPTY_METADATA)
    malformed = (b"\x06\x01", EMPTY_METADATA)
    pairs += [date, malformed]
    values = pa.array([v for v, _ in pairs] + [None], pa.binary())
    metadata = pa.array([m for _, m in pairs] + [None], pa.binary())
    texts, fallback = variant_to_json(values, metadata, np.array([True] * len(pairs) + [False]))
    utils = _json_utils()
    printed = texts.to_pylist()
    for row, (value, meta) in enumerate(pairs[:-2]):
        text = utils.to_json(value, meta)
        if fallback[row]:  # only variants holding a DECIMAL16: a number of more than 18 digits
            assert re.search(r"[0-9]{19,}|E[+-]", text.replace(".", "")), text
            continue
        assert printed[row] == text, value
    assert fallback[-3:-1].all() and printed[-1] is None and not fallback[-1]


def test_spark_glue_falls_back_and_names_bad_rows() -> None:
    """texts_to_variant gives PySpark's bytes for what the encoder leaves (NaN, a repeated key) and
    names the row of a text no variant holds; variant_to_texts prints a DATE through to_json."""
    from pyspark.sql.types import StructField, StructType, VariantType

    from spark_mergetree.spark.types import spark_arrow_schema
    from spark_mergetree.spark.variant import texts_to_variant, variant_to_texts

    target = spark_arrow_schema(StructType([StructField("v", VariantType())])).field("v").type
    texts = pa.array(['{"b":1,"a":[2.5,"x"]}', "NaN", None, '{"a":1,"a":2}'], pa.string())
    variants = texts_to_variant(texts, target, "v")
    expected = [VariantUtils.parse_json(t) if t is not None else None for t in texts.to_pylist()]
    got = [None if r is None else (r["value"], r["metadata"]) for r in variants.to_pylist()]
    assert got == expected
    assert variant_to_texts(variants, "v").to_pylist() == ['{"a":[2.5,"x"],"b":1}', "null", None, '{"a":2}']
    dated = pa.StructArray.from_arrays([pa.array([bytes([11 << 2]) + struct.pack("<i", 0)]),
                                        pa.array([EMPTY_METADATA])], names=["value", "metadata"])
    assert variant_to_texts(dated, "v").to_pylist() == ['"1970-01-01"']
    with pytest.raises(SchemaMismatchError, match="row 1"):
        texts_to_variant(pa.array(["1", "{oops"]), target, "v")
