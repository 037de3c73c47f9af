"""klog serve against a structure-aware fuzzer (tests/server/serve_fuzz.py) and the defects it found:
every request of every API and version klog advertises, built from its schema, then made hostile.
The server answers or closes that one connection, logs at most a line for it, and keeps serving."""

from __future__ import annotations

import struct

import pytest

from tests.server.serve_fuzz import ServeProcess, log_problems

pytest.importorskip("kio")


@pytest.fixture
def serve(data_dir, tmp_path):
    import klog

    with klog.open(data_dir) as store:
        store.create_topic("fz", partitions=2)
    with ServeProcess(data_dir, str(tmp_path / "serve.err")) as server:
        yield server


# -- an array claiming more entries than the frame has bytes -------------------------------------------
@pytest.mark.parametrize(("name", "frame"), ids=["compact", "legacy"], argvalues=[
    # ListTransactions v0 (flexible): its state filters, a compact array claiming 2**32 - 2 entries
    ("ListTransactionsRequest v0", struct.pack(">hhih", 66, 0, 1, 4) + b"fuzz\x00" + b"\xff\xff\xff\xff\x0f"
     + bytes(8)),
    # Metadata v4 (not flexible): its topics, an array claiming INT32_MAX entries
    ("MetadataRequest v4", struct.pack(">hhih", 3, 4, 1, 4) + b"fuzz" + struct.pack(">i", 2**31 - 1) + bytes(8)),
])
@pytest.mark.slow
def test_an_array_longer_than_its_frame_closes_that_connection_only(serve, name, frame):
    """kio's native reader makes room for every entry an array claims before reading one: 2**32 of
    them asked 32 GiB, which aborted the whole server (SIGABRT, every client gone). Such a frame is
    now refused before kio reads it, as Kafka's readers refuse it: that connection is closed."""
    assert serve.exchange(frame, 5).outcome == "closed"
    assert serve.health_s() < 2
    assert serve.alive()
    serve.new_lines()
    refusals = [line for line in serve.lines if f"cannot parse {name}: an array of" in line]
    assert len(refusals) == 1, serve.lines
    assert not log_problems(serve.lines), serve.lines


# -- Fetch: the zero topic id, names no topic can have ------------------------------------------------
def _fetch(client, version: int, topics: list[tuple[object, list[int]]]):
    """Fetch `version` of (topic name, or id from v13 on; partitions), no waiting."""
    import datetime

    from kio.static.primitive import i32Timedelta

    from klog.protocol.kafka import make
    from klog.protocol.schemas import request_schema

    mod = __import__(request_schema(1, version).__module__, fromlist=["FetchTopic"])
    by_id = version >= 13
    wanted = tuple(make(mod.FetchTopic, topic=topic, topic_id=topic if by_id else None, partitions=tuple(
        make(mod.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
             log_start_offset=-1, partition_max_bytes=1 << 16) for p in partitions)) for topic, partitions in topics)
    return client.send(1, version, replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=0,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=wanted,
                       forgotten_topics_data=(), rack_id="")


@pytest.mark.parametrize("version", [13, 17])
def test_a_fetch_naming_the_zero_topic_id_is_answered_unknown_topic_id(kafka_server, version):
    """kio reads the all-zero topic id as None; the event loop's fast path took None for "by name"
    and read `t.topic`, which v13+ has not: the connection was closed instead of answered."""
    from tests.serve_helpers import RawClient

    with RawClient(kafka_server.port) as client:
        answer = _fetch(client, version, [(None, [0])])
        assert [p.error_code for t in answer.responses for p in t.partitions] == [100]  # UNKNOWN_TOPIC_ID
        assert client.send(18, 0).error_code == 0  # the same connection goes on


def test_a_fetch_of_names_no_topic_can_have_is_answered_without_a_log_line_per_partition(kafka_server, caplog):
    """Each partition of an invalid name ('x/../y', a newline, '', 300 characters) was answered
    KAFKA_STORAGE_ERROR (a client retries it) with a warning each, the client's text in it
    unescaped: one request, as many lines as it named partitions, and lines a client could forge."""
    import logging

    from tests.serve_helpers import RawClient

    caplog.set_level(logging.INFO, logger="klog.serve")
    names = ["x/../y", "fz\nklog serve: a forged line", "", "b" * 300]
    with RawClient(kafka_server.port) as client:
        answer = _fetch(client, 12, [(name, [0, 1, 2]) for name in names])
    assert [p.error_code for t in answer.responses for p in t.partitions] == [3] * 12  # UNKNOWN_TOPIC_OR_PARTITION
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records


_INVALID_NAMES = ["x/../y", "fz\nklog serve: a forged line", "", "b" * 300]


def test_list_offsets_and_txn_markers_for_names_no_topic_can_have(kafka_server, caplog):
    """ListOffsets and WriteTxnMarkers answered each partition of an invalid name KAFKA_STORAGE_ERROR
    with a warning each (the client's text unescaped); now UNKNOWN_TOPIC_OR_PARTITION, as Kafka, and
    no line."""
    import logging

    from kio.schema.list_offsets.v7 import request as lo
    from kio.schema.write_txn_markers.v1 import request as wtm

    from tests.serve_helpers import RawClient

    caplog.set_level(logging.INFO, logger="klog.serve")
    with RawClient(kafka_server.port) as client:
        offsets = client.send(2, 7, replica_id=-1, isolation_level=0, topics=tuple(
            lo.ListOffsetsTopic(name=name, partitions=tuple(lo.ListOffsetsPartition(partition_index=p, timestamp=-1)
                                                            for p in range(3))) for name in _INVALID_NAMES))
        markers = client.send(27, 1, markers=(wtm.WritableTxnMarker(
            producer_id=5, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=tuple(wtm.WritableTxnMarkerTopic(name=name, partition_indexes=(0, 1, 2))
                         for name in _INVALID_NAMES)),))
    assert [p.error_code for t in offsets.topics for p in t.partitions] == [3] * 12
    assert [p.error_code for m in markers.markers for t in m.topics for p in t.partitions] == [3] * 12
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records


@pytest.mark.parametrize(("version", "topic_id", "error"), [(12, None, 100), (10, None, 42), (11, "random", 42)])
def test_metadata_for_a_null_topic_name_is_answered(kafka_server, version, topic_id, error):
    """A null topic name (nullable from v10) with the zero id (kio: None) was authorized as a name
    (AttributeError), and one with an unknown id was answered with a null name v10-v11 cannot
    carry (the encoder failed): the connection was closed. v12 answers UNKNOWN_TOPIC_ID (the topic
    is asked by id), v10-v11 INVALID_REQUEST (Kafka refuses a null name before v12)."""
    import uuid

    from klog.protocol.kafka import make
    from klog.protocol.schemas import request_schema
    from tests.serve_helpers import RawClient

    mod = __import__(request_schema(3, version).__module__, fromlist=["MetadataRequestTopic"])
    wanted = make(mod.MetadataRequestTopic, name=None, topic_id=uuid.uuid4() if topic_id else None)
    with RawClient(kafka_server.port) as client:
        answer = client.send(3, version, topics=(wanted,), allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        assert [t.error_code for t in answer.topics] == [error]
        assert client.send(18, 0).error_code == 0


# -- the seeded fuzz run -------------------------------------------------------------------------------
def _advertised() -> list[tuple[int, int]]:
    """Every (api key, version) ApiVersions advertises."""
    from klog.server import dispatch

    return [(key, v) for key, h in sorted(dispatch.load_handlers().items()) for v in range(h.min_version,
                                                                                           h.max_version + 1)]


def _fuzz(serve, seed: int, rounds: int) -> None:
    import random

    from tests.server.serve_fuzz import fuzz_cases, rss_growth_kb, run_campaign

    apis = _advertised()
    seen = run_campaign(serve, fuzz_cases(apis, random.Random(seed), rounds))
    assert not seen.problems, "\n".join(p[:600] for p in seen.problems[:10])
    assert sum(seen.outcomes.values()) == rounds * len(apis), seen.outcomes
    assert seen.outcomes.get("answered", 0) > rounds * len(apis) // 4, seen.outcomes  # the requests were read
    assert rss_growth_kb(seen) < 100_000, seen.rss_kb


@pytest.mark.slow
def test_seeded_fuzz_of_every_api_and_version(serve, replay_seed):
    """Two passes over every (api key, version) klog advertises, each request built from its schema,
    then sent as built (plain or hostile values), truncated or mutated (~15 s)."""
    _fuzz(serve, replay_seed(20261128), rounds=2)


@pytest.mark.slow
def test_seeded_fuzz_of_every_api_and_version_longer(serve, replay_seed):
    _fuzz(serve, replay_seed(7), rounds=12)


def test_delete_groups_of_a_4000_byte_group_id_is_answered(kafka_server):
    """Found by the seeded fuzz run (seed 13): the scan of such a group's offsets failed an
    assertion in the metadata store and the connection was closed after an 'internal error'."""
    from tests.serve_helpers import RawClient

    with RawClient(kafka_server.port) as client:
        answer = client.send(42, 0, groups_names=("fz" * 2000, "g"))
        assert len(answer.results) == 2
        assert client.send(18, 0).error_code == 0


@pytest.mark.parametrize("version", [0, 4])
def test_metadata_auto_creating_a_name_with_a_nul_is_answered(kafka_server, version):
    """Found by the fuzzer: Metadata v0 (which auto-creates what it names) for a topic named '\\0'
    reached os.listdir of the would-be partition folder before the name was checked (ValueError:
    embedded null byte) and the connection was closed; now INVALID_TOPIC_EXCEPTION, as Kafka."""
    from kio.schema.metadata.v4.request import MetadataRequestTopic

    from tests.serve_helpers import RawClient

    with RawClient(kafka_server.port) as client:
        answer = client.send(3, version, topics=(MetadataRequestTopic(name="a\0b"),), allow_auto_topic_creation=True)
        assert [t.error_code for t in answer.topics] == [17]  # INVALID_TOPIC_EXCEPTION
        assert client.send(18, 0).error_code == 0


def test_tagged_fields_the_schema_does_not_know_are_skipped_as_kafka_skips_them(kafka_server, caplog):
    """Found by the fuzzer: kio's reader refuses a tag it does not know, so a request carrying one
    (a newer client's field, in the header, the body or a nested entry) closed the connection
    ('Unknown tagged field tag'); Kafka's readers skip unknown tags. Now they are dropped first."""
    import logging

    from kio.schema.metadata.v12.response import MetadataResponse

    from tests.serve_helpers import RawClient

    caplog.set_level(logging.WARNING, logger="klog.serve")
    kafka_server.store.create_topic("fz", partitions=2)
    header = struct.pack(">hhih", 3, 12, 7, 1) + b"c" + b"\x01" + b"\x05\x02ab"  # a header tag 5
    topic = bytes(16) + b"\x03fz" + b"\x01\x07\x01x"  # the topic entry: tag 7
    body = b"\x02" + topic + b"\x00\x00" + b"\x02" + b"\x63\x00" + b"\x64\x03abc"  # the request: tags 99, 100
    with RawClient(kafka_server.port) as client:
        client.correlation = 7
        client.send_raw(header + body)
        answer = client.read(MetadataResponse)
        assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [("fz", 0, 2)]
        assert client.send(18, 0).error_code == 0
    assert not caplog.records
