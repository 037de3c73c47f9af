"""The codec's varint tables are built on first use: threads encoding (or decoding) at once must
each find them whole, never half-built (IndexError in a producer's encode)."""

from __future__ import annotations

import sys
import threading

import pytest

from klog.store import codec


@pytest.fixture
def fresh_tables(monkeypatch):
    # the Python encoder and decoder, which use the tables (once the compiled reader is loaded, by
    # an earlier test in this process, every batch would go there)
    monkeypatch.setattr(codec.fastrecords, "wanted", lambda count: False)
    saved = [list(t) for t in (codec._VARINT, codec._SIGNED_VARINT, codec._ZIGZAG2, codec._LENGTH2)]
    for t in (codec._VARINT, codec._SIGNED_VARINT, codec._ZIGZAG2, codec._LENGTH2):
        t.clear()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: a half-built table shows at once
    yield
    sys.setswitchinterval(interval)
    for t, items in zip((codec._VARINT, codec._SIGNED_VARINT, codec._ZIGZAG2, codec._LENGTH2), saved, strict=True):
        t[:] = items


def test_threads_encoding_and_decoding_at_first_use_find_whole_tables(fresh_tables):
    records = [(None, b"v%d" % i, [], 1_000 + i) for i in range(3)]
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def work() -> None:
        try:
            start.wait(10)
            for _ in range(20):
                batch = codec.encode_batch(records, 0)
                header = codec.read_header(batch)
                assert codec.decode_batch_values(batch, 0, header) == [b"v0", b"v1", b"v2"]
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, repr(failures[0])
    assert len(codec._SIGNED_VARINT) == 1 << 14 and len(codec._VARINT) == 1 << 14 and len(codec._LENGTH2) == 0x80
