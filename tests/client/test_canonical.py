"""The client's canonical bytes are the server's, byte for byte (the client does not import the project:
the two implementations are held to each other here), and what the client refuses to write is what the
engine would call record_invalid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from loopx_client import canonical

from engine import canonical as engine

# JSON values a record may hold: strings over all of Unicode but lone surrogates, integers of any size,
# booleans, null, lists and objects, nested.
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=30,
)
_records = st.dictionaries(_text, _values, max_size=8)


@settings(max_examples=150, deadline=None)
@given(_records)
def test_canonical_bytes_and_digest_match_the_engine(record):
    assert canonical.canonical_bytes(record) == engine.canonical_bytes(record)
    assert canonical.digest(record) == engine.digest(record)
    # What the client reads back is what the engine reads: the same object, judged valid by both.
    line = canonical.canonical_bytes(record)
    parsed = engine.parse_line(line)
    assert parsed.error is None and parsed.obj == record
    assert canonical.parse_record(line) == record


@settings(max_examples=100, deadline=None)
@given(_records, st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_anywhere_is_refused_as_the_engine_would_call_it_invalid(record, number):
    record = dict(record, nested={"x": [1, number]})
    try:
        canonical.check_value(record)
    except canonical.RecordValueError:
        pass
    else:
        raise AssertionError("a float was accepted")
    if number == number and abs(number) != float("inf"):  # finite: the engine classifies it record_invalid
        assert engine.parse_line(engine.canonical_bytes(record)).error == "record_invalid"
        assert canonical.parse_record(engine.canonical_bytes(record)) is None


def test_lone_surrogates_duplicate_keys_and_torn_lines_are_not_records():
    import pytest

    with pytest.raises(canonical.RecordValueError):
        canonical.check_value({"s": "\ud800"})
    assert canonical.parse_record(b'{"a":1,"a":2}') is None
    assert engine.parse_line(b'{"a":1,"a":2}').error == "record_invalid"
    assert canonical.parse_record(b'{"a":1') is None
    assert canonical.parse_record(b"[1]") is None
    assert canonical.parse_record(b'{"a":NaN}') is None
