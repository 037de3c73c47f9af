"""The entry count that refuses a request before it is parsed (klog/protocol/walk.py) is the same
through its fast walk over flat entries as through the general walk, for every request klog serves
(oldest and newest versions), and counts a hostile Produce's entries exactly."""

from __future__ import annotations

import io

import pytest

from klog.protocol import walk
from klog.protocol.walk import TooManyEntries, count_entries
from klog.server import dispatch
from tests.serve_helpers import huge_produce, repeated_metadata, request_class, sample_entity

pytest.importorskip("kio")
from kio.serial import entity_writer  # noqa: E402


def _every_request() -> list[tuple[int, int]]:
    """Each API's oldest and newest version (most APIs: one not flexible, one flexible, the walk's
    two ways of reading lengths)."""
    return sorted({(key, v) for key, h in dispatch.load_handlers().items() for v in (h.min_version, h.max_version)})


def test_fast_and_general_walks_count_alike_for_every_request(monkeypatch):
    bodies = {}
    for key, version in _every_request():
        cls = request_class(key, version)
        buf = io.BytesIO()
        entity_writer(cls)(buf, sample_entity(cls, {"string": "t\u00e9", "records": b"abc"}))
        bodies[(key, version)] = (cls, buf.getvalue())
    fast = {k: count_entries(body, 0, cls, 1000) for k, (cls, body) in bodies.items()}
    monkeypatch.setattr(walk, "_flat", lambda cls: None)
    general = {k: count_entries(body, 0, cls, 1000) for k, (cls, body) in bodies.items()}
    assert fast == general
    assert sum(fast.values()) > len(fast)  # the samples hold arrays: the walks counted something


@pytest.mark.parametrize(("frame", "entries"), [(huge_produce(3000), 3001), (repeated_metadata(2500), 2500)])
def test_a_hostile_request_is_counted_exactly_and_refused_past_the_limit(frame, entries):
    from klog.protocol import framing

    body = frame[4:]
    prefix = framing.read_prefix(body)
    _, at, schema = framing.parse_header(body, prefix)
    assert count_entries(body, at, schema, 10_000) == entries
    with pytest.raises(TooManyEntries):
        count_entries(body, at, schema, entries - 1)
