"""How a Fetch answer goes out: small ranges read by the worker thread and written with the answer's
other bytes, large ones by sendfile (zero-copy), in one answer; each partition gets exactly its
stored batches, whichever way they went. And ApiVersions, encoded once, answers as kio encodes it."""

from __future__ import annotations

import os

import pytest

from klog.protocol.framing import encode_body
from klog.server import fetch as fetch_module
from klog.server.dispatch import api_versions_response
from klog.store.format import RECORD_BATCH_OVERHEAD
from klog.store.segment import OpenLog
from tests.serve_helpers import RawClient, batch, fetch_fields, produce

pytest.importorskip("kio")
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic  # noqa: E402


def _stored_batches(data_dir: str, topic: str, partition: int) -> bytes:
    folder = os.path.join(data_dir, "logs", f"{topic}-{partition}")
    if not os.path.isdir(folder):  # the store's layout: find the partition's folder wherever it is
        folder = next(os.path.join(root, d) for root, dirs, _ in os.walk(data_dir) for d in dirs
                      if d == f"{topic}-{partition}")
    [log] = [f for f in os.listdir(folder) if f.endswith(".log")]
    with open(os.path.join(folder, log), "rb") as f:
        return f.read()


def test_small_and_large_ranges_in_one_answer_are_each_partitions_stored_bytes(kafka_server, data_dir, monkeypatch):
    kafka_server.store.create_topic("mixed", partitions=4)
    big = [os.urandom(1000) for _ in range(60)]  # ~60 KiB: over INLINE_RANGE_BYTES, sent by sendfile
    with RawClient(kafka_server.port) as client:
        for p in range(3):
            for i in range(3):
                assert produce(client, "mixed", p, batch([b"p%d-%d" % (p, i)]))[0] == 0
        assert produce(client, "mixed", 3, batch(big))[0] == 0
        # 2 small ranges fit the per-answer budget; the third small one and the large one do not
        monkeypatch.setattr(fetch_module, "INLINE_BYTES_MAX", 2 * len(_stored_batches(data_dir, "mixed", 0)))
        fields = fetch_fields("mixed", 0, 0)
        parts = tuple(FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                     log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(4))
        fields["topics"] = (FetchTopic(topic="mixed", partitions=parts),)
        fields["max_bytes"] = 4 << 20
        answer = client.send(1, 12, **fields)
    got = {int(p.partition_index): p for p in answer.responses[0].partitions}
    assert sorted(got) == [0, 1, 2, 3]
    for p in range(4):
        assert int(got[p].error_code) == 0
        assert int(got[p].high_watermark) == (3 if p < 3 else 60)
        assert bytes(got[p].records) == _stored_batches(data_dir, "mixed", p), p
    assert len(bytes(got[3].records)) > fetch_module.INLINE_RANGE_BYTES


def test_a_range_read_short_is_a_storage_error_not_a_short_answer(kafka_server, monkeypatch):
    kafka_server.store.create_topic("shrunk")
    with RawClient(kafka_server.port) as client:
        assert produce(client, "shrunk", 0, batch([b"a", b"b"]))[0] == 0
        # retention cut it: the range's read (by the store, which reads small ranges itself) comes short
        real = OpenLog.read  # (a read's preads go through the segment file it pinned)
        monkeypatch.setattr(OpenLog, "read", lambda self, pos, n: real(self, pos, n)[:-1]
                            if n > RECORD_BATCH_OVERHEAD else real(self, pos, n))
        part = client.send(1, 12, **fetch_fields("shrunk", 0, 0)).responses[0].partitions[0]
    assert int(part.error_code) == 56  # KAFKA_STORAGE_ERROR
    assert not part.records


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_answer_is_kios_encoding(kafka_server, version):
    expected = encode_body(api_versions_response(version))
    for _ in range(2):  # the first answer encodes it, the second sends what was kept
        with RawClient(kafka_server.port) as client:
            answer = client.send(18, version, client_software_name="t", client_software_version="1")
        assert encode_body(answer) == expected
