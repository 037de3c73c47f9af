"""One transactional writer of the fault test (tests/server/test_txn_faults.py), run as its own process so
the test can kill -9 it: endless transactions of random records over the topic's partitions, each
committed or aborted at random, every step appended to a history file before and after it happens.

    python tests/server/txn_fault_writer.py BOOTSTRAP TOPIC PARTITIONS TRANSACTIONAL_ID WRITER_NAME HISTORY SEED

History lines (JSON): {"op": "begin", "txn": T, "values": [[partition, value], ...]}, then one of
"commit-ok", "abort-ok" (acknowledged), "commit-failed"/"abort-failed" (outcome unknown); "fenced"
or "fatal" end the process (exit 3), as a killed one ends it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import confluent_kafka as ck


def main() -> int:
    bootstrap, topic, partitions, tid, name, history_path, seed = sys.argv[1:8]
    rng = random.Random(int(seed))
    fd = os.open(history_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(**entry: object) -> None:
        os.write(fd, (json.dumps(entry) + "\n").encode())  # one write(2): whole lines survive kill -9

    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 3000,
                            "linger.ms": 2, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
                            "message.timeout.ms": 3000, "socket.timeout.ms": 3000})
    deadline = time.monotonic() + 60
    while True:
        try:
            producer.init_transactions(10)
            break
        except ck.KafkaException as e:
            if e.args[0].fatal() or time.monotonic() > deadline:
                log(op="fatal", error=str(e))
                return 3
    n = 0
    while True:
        n += 1
        txn = f"{name}.{n}"
        values = [[rng.randrange(int(partitions)), f"{txn}.{i}"] for i in range(rng.randint(1, 6))]
        commit = rng.random() < 0.6
        log(op="begin", txn=txn, values=values)
        try:
            producer.begin_transaction()
            for partition, value in values:
                producer.produce(topic, value=value.encode(), partition=partition)
                if rng.random() < 0.4:  # a batch of its own: transactions of several batches in a partition
                    producer.flush(10)
            if commit:
                producer.commit_transaction(10)
                log(op="commit-ok", txn=txn)
            else:
                producer.flush(10)
                producer.abort_transaction(10)
                log(op="abort-ok", txn=txn)
        except ck.KafkaException as e:
            err = e.args[0]
            log(op="commit-failed" if commit else "abort-failed", txn=txn, error=str(err))
            if err.fatal():
                log(op="fenced" if err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED) else "fatal",
                    error=str(err))
                return 3
            try:
                producer.abort_transaction(10)  # abortable or timed out: end it before the next one
                log(op="abort-ok", txn=txn, after="failure")
            except ck.KafkaException as again:
                log(op="abort-failed", txn=txn, error=str(again))
                return 3


if __name__ == "__main__":
    sys.exit(main())
