"""One stalled write must not stall everyone: produces stuck in the store (a disk that stopped
answering, simulated by appends that block) leave other clients' Metadata and Fetch answered."""

from __future__ import annotations

import threading
import time

from tests.serve_helpers import RawClient, another_client_answered, batch, produce, produce_request_fields

STALL_LIMIT_S = 30  # the simulated disk answers again after this at the latest


def test_stalled_produces_do_not_stop_other_clients_metadata_and_fetch(kafka_server, store) -> None:
    stuck_partitions = 12  # more than the server's worker threads
    store.create_topic("stuck", partitions=stuck_partitions)
    store.create_topic("free")
    port = kafka_server.port
    with RawClient(port) as client:
        assert produce(client, "free", 0, batch([b"before"]))[0] == 0

    release = threading.Event()
    appender = kafka_server.appender
    real_append = appender.append
    entered = threading.Semaphore(0)

    def stalling_append(topic, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - the appender's own
        if topic == "stuck":
            entered.release()
            release.wait(STALL_LIMIT_S)
        return real_append(topic, *args, **kwargs)

    appender.append = stalling_append
    answers: list[int] = []

    def stuck_producer(partition: int) -> None:
        with RawClient(port) as c:
            c.sock.settimeout(STALL_LIMIT_S + 10)
            resp = c.send(0, 9, **produce_request_fields(9, "stuck", partition, batch([b"late"])))
            answers.append(int(resp.responses[0].partition_responses[0].error_code))

    threads = [threading.Thread(target=stuck_producer, args=(p,)) for p in range(stuck_partitions)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        stalled = 0
        while stalled < 4 and time.monotonic() < deadline:  # several appends are stuck in the store
            stalled += entered.acquire(timeout=0.5)
        assert stalled >= 4
        time.sleep(0.3)  # and the rest are queued behind them
        meta, fetched, took = another_client_answered(port)
        assert {str(t.name) for t in meta.topics} >= {"stuck", "free"}
        part = fetched.responses[0].partitions[0]
        assert int(part.error_code) == 0 and int(part.high_watermark) == 1
        assert took < 3.0, f"Metadata and Fetch took {took:.1f} s while produces were stalled"
        assert not answers  # the stalled produces are still stalled
    finally:
        release.set()
        for t in threads:
            t.join(STALL_LIMIT_S + 15)
        appender.append = real_append
    assert answers == [0] * stuck_partitions  # and each is answered once the disk is back
