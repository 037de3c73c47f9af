"""The one-partition Fetch answer (klog/server/fetch_response.py encode_one: its topic part laid
out once per version and topic) is byte for byte the general answer, and kio's: at every version
the event loop answers (v4-v17), by topic name and by id, for records read, none, and an error."""

from __future__ import annotations

import io
import uuid

import pytest

pytest.importorskip("kio")
from kio.schema.errors import ErrorCode as E  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

from klog.protocol.schemas import response_schema  # noqa: E402
from klog.server.fetch import PartitionAnswer, TopicAnswer, _answer  # noqa: E402
from klog.server.fetch_response import encode, encode_one  # noqa: E402

# (error, high watermark, last stable offset, log start, records): the sizes cross the one- and
# two-byte varints of a flexible answer's records length
CASES = [
    (E.none, 0, 0, 0, None),  # an empty partition
    (E.none, 7, 7, 2, b""),  # at the end
    (E.none, 8, 8, 0, b"r" * 61),
    (E.none, 9, 9, 0, b"r" * 0x7E),
    (E.none, 9, 9, 0, b"r" * 0x7F),
    (E.none, 2**40, 2**40, 5, b"r" * 0x3FFF),
    (E.none, 3, 3, 0, b"r" * 20_000),
    (E.offset_out_of_range, 5, 5, 1, None),
    (E.unknown_topic_or_partition, -1, -1, -1, None),
]


def _partition(index: int, case: tuple) -> PartitionAnswer:
    error, hw, lso, start, data = case
    p = PartitionAnswer(index, error)
    p.high_watermark, p.upper, p.log_start_offset, p.data = hw, lso, start, data
    return p


@pytest.mark.parametrize("version", range(4, 18))
def test_the_one_partition_answer_is_the_general_answer_and_kios(version):
    response_type = response_schema(1, version)
    read, write = entity_reader(response_type), entity_writer(response_type)
    topic_id = uuid.UUID("5d4a1e36-3a2e-4b8f-9c11-7f5e2b0c9a01")
    for name in ("t", "a-topic-name-" + "x" * 120):  # (a name past a one-byte length varint)
        for index, case in enumerate(CASES):
            p = _partition(index * 3, case)
            topic = TopicAnswer(name, [p], topic_id=topic_id)
            (one,) = encode_one(response_type, version, topic, p).parts
            (general,) = encode(response_type, version, [topic]).parts
            assert one == general, (version, name, case[0], len(case[4] or b""))
            # kio reads it as the partition's fields, and writes those back as the same bytes
            decoded, used = read(one, 0)
            assert used == len(one)
            (t,) = decoded.responses
            assert (t.topic_id if version >= 13 else t.topic) == (topic_id if version >= 13 else name)
            (got,) = t.partitions
            assert (got.partition_index, got.error_code, got.high_watermark, got.last_stable_offset) == \
                (index * 3, case[0], case[1], case[2])
            assert bytes(got.records or b"") == (case[4] or b"")
            buf = io.BytesIO()
            write(buf, decoded)
            assert buf.getvalue() == one


def test_the_answer_takes_the_one_partition_layout_only_where_it_holds():
    """_answer: encode_one for one partition of one topic with its bytes read or none; the general
    layout for aborted transactions (read_committed), two partitions, two topics, v0-v3 (which
    carry no log start nor aborted list), each the same bytes either way."""
    from klog.server import fetch_response

    calls = []
    real = fetch_response.encode_one

    def counting(*args):  # noqa: ANN002, ANN202
        calls.append(args[1])
        return real(*args)

    import klog.server.fetch as fetch_module

    saved = fetch_module.encode_one
    fetch_module.encode_one = counting
    try:
        for version, partitions, aborted, topics, one in [(12, 1, (), 1, True), (4, 1, (), 1, True),
                                                          (12, 1, [(7, 3)], 1, False), (12, 2, (), 1, False),
                                                          (12, 1, (), 2, False), (3, 1, (), 1, False)]:
            response_type = response_schema(1, version)
            answers = []
            for t in range(topics):
                ps = [_partition(i, CASES[2]) for i in range(partitions)]
                for p in ps:
                    p.aborted = aborted
                answers.append(TopicAnswer(f"t{t}", ps, topic_id=uuid.uuid4()))
            calls.clear()
            assert _answer(response_type, version, answers).parts == encode(response_type, version, answers).parts
            assert calls == ([version] if one else []), (version, partitions, aborted, topics)
    finally:
        fetch_module.encode_one = saved
