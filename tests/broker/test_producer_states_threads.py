"""klog serve's threads share one RawAppender's ProducerStates: append workers add a partition's
producer states at its first idempotent write while a topic's alter or delete (another thread)
forgets the topic's."""

from __future__ import annotations

import sys
import threading
import time

from klog.broker.batches import ProducerStates

STRESS_S = 0.3  # the race showed within ~10 ms before the fix


def test_forgetting_a_topic_while_other_partitions_are_added_does_not_raise():
    states = ProducerStates()
    for i in range(2000):
        states._by_partition[("t", i)] = {}
    stop = time.monotonic() + STRESS_S
    failures: list[BaseException] = []

    def first_writes_elsewhere() -> None:  # what ProducerStates._load does at each partition's first write
        i = 0
        while time.monotonic() < stop and not failures:
            states._by_partition[("u", i)] = {}
            i += 1

    adder = threading.Thread(target=first_writes_elsewhere)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches as often as a busy server's
    adder.start()
    try:
        while time.monotonic() < stop and not failures:
            try:
                states.forget("t", 5)
                states.forget("v")
            except RuntimeError as e:  # dictionary changed size during iteration
                failures.append(e)
    finally:
        adder.join(30)
        sys.setswitchinterval(switch)
    assert not failures
    assert ("t", 5) not in states._by_partition and ("t", 6) in states._by_partition
