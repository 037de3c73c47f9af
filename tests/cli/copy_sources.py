"""Sources for the reviews of the commands that copy a topic (tests/cli/test_mirror_review.py,
tests/cli/test_replay_review.py): a store's topic t recreated under a rerun, and a cluster topic
written by a transactional producer (confluent-kafka) that aborts, commits, or leaves a transaction open."""

from __future__ import annotations

from collections.abc import Callable

import klog


def fill_t(path: str, values: list[bytes]) -> None:
    """`values` appended to topic t (1 partition, made if missing) of the store at `path`."""
    with klog.open(path) as store:
        if not store.has_topic("t"):
            store.create_topic("t", 1)
        with store.producer() as producer:
            for v in values:
                producer.send("t", v)


def t_recreated_after(src: str, first_run: Callable) -> None:
    """Topic t of the store `src` holds old0..old4 when `first_run()` copies it (exit 0); then t is
    deleted and made again, holding new0..new2 (its end, 3, below where the copy got to, 5)."""
    fill_t(src, [b"old%d" % i for i in range(5)])
    assert first_run().exit_code == 0
    with klog.open(src) as store:
        store.delete_topic("t")
    fill_t(src, [b"new%d" % i for i in range(3)])


def transactions(bootstrap: str, topic: str, *steps: tuple[bytes, str]):  # noqa: ANN201
    """A confluent-kafka producer of transactional.id 'tx' writing to `topic` one transaction a step, in
    turn: (value, "abort" | "commit" | "open"); an "open" one is flushed and left open. The producer."""
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx"})
    producer.init_transactions(10)
    for value, end in steps:
        producer.begin_transaction()
        producer.produce(topic, value)
        if end == "commit":
            producer.commit_transaction(10)
            continue
        producer.flush(10)
        if end == "abort":
            producer.abort_transaction(10)
    return producer
