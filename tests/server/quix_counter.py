"""A quixstreams application with processing_guarantee=os.environ.get("QG", "exactly-once") (run by
tests/server/test_serve_quixstreams.py as its own process, killed with SIGKILL and restarted):
a stateful count per key of the topic `words`, each count written to `counts`. The state's
changelog topic and the output are written in the app's transactions, with the input offsets.

    python quix_counter.py BOOTSTRAP STATE_DIR IDLE_S
stops once no input arrived for IDLE_S seconds. QG=at-least-once in the environment runs it
without transactions: the test then fails with duplicates (it can tell the difference).
"""

from __future__ import annotations

import logging
import os
import sys
import time


def main(bootstrap: str, state_dir: str, idle_s: float) -> None:
    from quixstreams import Application

    guarantee = os.environ.get("QG", "exactly-once")
    app = Application(broker_address=bootstrap, consumer_group="counter", processing_guarantee=guarantee,
                      auto_offset_reset="earliest", state_dir=state_dir, commit_interval=0.2,
                      loglevel=logging.WARNING, use_changelog_topics=True,
                      # a killed run's group membership and open transaction end within seconds (the
                      # test's klog serve allows sessions this short), not Kafka's 45 s and 60 s
                      consumer_extra_config={"session.timeout.ms": 2000, "heartbeat.interval.ms": 300},
                      producer_extra_config={"transaction.timeout.ms": 2000})
    words = app.topic("words", key_deserializer="str", value_deserializer="str")
    counts = app.topic("counts", key_serializer="str", value_serializer="json")

    def count(value: str, state) -> dict:  # noqa: ANN001 - quixstreams' State
        time.sleep(0.005)  # slow enough that a kill lands between the app's commits (every 0.2 s)
        n = state.get("count", 0) + 1
        state.set("count", n)
        return {"word": value, "count": n}

    app.dataframe(words).apply(count, stateful=True).to_topic(counts)
    app.run(timeout=idle_s)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
