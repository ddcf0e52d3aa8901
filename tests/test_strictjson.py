"""The one strict JSON reader (trtwarm.strictjson): what a writer of a volume, a store or a registry can hand it is
parsed or refused with JSONRefused, never accepted last-wins and never an exception of another type."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtwarm import strictjson

LIMIT = 1 << 20


@pytest.mark.parametrize("data, why", [
    (b'{"mode": "enforce", "mode": "off"}', "given twice"),
    (b'{"a": {"b": 1, "b": 1}}', "given twice"),
    (b"NaN", "not a JSON number"),
    (b'{"x": -Infinity}', "not a JSON number"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (b'{"a":' * 65 + b"1" + b"}" * 65, "nested deeper"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"n": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b"", "not valid JSON"),
    (b'{"a": 1} trailing', "not valid JSON"),
])
def test_refused_with_the_reason(data, why):
    with pytest.raises(strictjson.JSONRefused, match=why):
        strictjson.loads(data, limit=len(data) + 1)


def test_the_size_cap_is_checked_before_parsing():
    with pytest.raises(strictjson.JSONRefused, match="larger than 10 bytes"):
        strictjson.loads(b" " * 11, limit=10)


def test_an_object_is_required_where_asked():
    assert strictjson.loads_object(b'{"a": [1, 2.5, null, true, "s"]}', limit=LIMIT) == {"a": [1, 2.5, None, True, "s"]}
    with pytest.raises(strictjson.JSONRefused, match="a JSON list, not an object"):
        strictjson.loads_object(b"[1]", limit=LIMIT)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                                max_size=4),
                     max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_what_trtwarm_writes_reads_back(doc):
    assert strictjson.loads(json.dumps(doc).encode(), limit=LIMIT) == doc


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_parse_or_are_refused(data):
    try:
        strictjson.loads(data, limit=LIMIT)
    except strictjson.JSONRefused:
        pass
