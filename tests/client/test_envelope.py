"""The JSON envelope: consume --json's text is what json.dumps gives for the envelope's dict, and
parse_envelope reads it back losslessly."""

from __future__ import annotations

import base64
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from klog.client.envelope import parse_envelope, record_to_json
from klog.client.records import Record

text_or_bytes = st.none() | st.binary(max_size=30) | st.text(max_size=30).map(str.encode)


def _utf8(b: bytes) -> str | None:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _reference(r: Record) -> str:
    def j(b: bytes | None):
        if b is None:
            return None
        text = _utf8(b)
        return text if text is not None else {"base64": base64.b64encode(b).decode()}

    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                       "timestamp_type": r.timestamp_type_name, "key": j(r.key), "value": j(r.value),
                       "headers": [[k, j(v)] for k, v in r.headers]}, ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(topic=st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True), partition=st.integers(0, 10_000),
       offset=st.integers(0, 2**63 - 1), ts=st.integers(-1, 2**63 - 1), ts_type=st.sampled_from([0, 1]),
       key=text_or_bytes, value=text_or_bytes,
       headers=st.lists(st.tuples(st.text(max_size=8), text_or_bytes), max_size=3))
def test_record_to_json_is_json_dumps_of_the_envelope(topic, partition, offset, ts, ts_type, key, value,
                                                      headers) -> None:
    r = Record(topic, partition, offset, ts, ts_type, key, value, headers)
    line = record_to_json(r)
    assert line == _reference(r)
    back = parse_envelope(line.encode())
    assert (back.key, back.value, back.headers, back.partition) == (key, value, list(headers), partition)


def test_control_characters_and_quotes_are_escaped() -> None:
    r = Record("t", 0, 1, 2, 0, b'"\\\x00\n', "é\u2028".encode(), [("h\"", b"\x7f")])
    assert record_to_json(r) == _reference(r)
    assert json.loads(record_to_json(r))["key"] == '"\\\x00\n'
