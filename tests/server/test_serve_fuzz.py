"""klog serve against a structure-aware fuzzer (tests/server/serve_fuzz.py) and the defects it found:
every request of every API and version klog advertises, built from its schema, then made hostile.
The server answers or closes that one connection, logs at most a line for it, and keeps serving."""

from __future__ import annotations

import struct

import pytest

from tests.server.serve_fuzz import ServeProcess, log_problems

pytest.importorskip("kio")


@pytest.fixture
def serve(data_dir):
    import klog

    with klog.open(data_dir) as store:
        store.create_topic("fz", partitions=2)
    with ServeProcess(data_dir) as server:
        yield server


# -- an array claiming more entries than the frame has bytes -------------------------------------------
@pytest.mark.parametrize(("name", "frame"), ids=["compact", "legacy"], argvalues=[
    # ListTransactions v0 (flexible): its state filters, a compact array claiming 2**32 - 2 entries
    ("ListTransactionsRequest v0", struct.pack(">hhih", 66, 0, 1, 4) + b"fuzz\x00" + b"\xff\xff\xff\xff\x0f"
     + bytes(8)),
    # Metadata v4 (not flexible): its topics, an array claiming INT32_MAX entries
    ("MetadataRequest v4", struct.pack(">hhih", 3, 4, 1, 4) + b"fuzz" + struct.pack(">i", 2**31 - 1) + bytes(8)),
])
def test_an_array_longer_than_its_frame_closes_that_connection_only(serve, name, frame):
    """kio's native reader makes room for every entry an array claims before reading one: 2**32 of
    them asked 32 GiB, which aborted the whole server (SIGABRT, every client gone). Such a frame is
    now refused before kio reads it, as Kafka's readers refuse it: that connection is closed."""
    assert serve.exchange(frame, 5).outcome == "closed"
    assert serve.health_s() < 2
    assert serve.alive()
    refusals = [line for line in serve.lines if f"cannot parse {name}: an array of" in line]
    assert len(refusals) == 1, serve.lines
    assert not log_problems(serve.lines), serve.lines
