"""The Connect review's finding 3: a source's poll() raising RetriableError is polled again, as Kafka's
AbstractWorkerSourceTask.poll does."""

from __future__ import annotations

import pytest

from tests.connect.helpers import running, values, wait_for


@pytest.mark.slow
def test_poll_raising_retriable_error_is_polled_again(data_dir):
    """errors.retry.timeout is 0 by default: that bounds converters, transforms and the producer, not
    poll(), which Kafka logs and calls again without limit."""
    warnings: list[str] = []
    config = {"name": "flaky", "connector.class": "tests.connect.retriable_source.RetriableSource",
              "topic": "out", "fail.polls": "2", "errors.retry.delay.max.ms": "100", "value.converter": "string"}
    with running(data_dir, config, warnings=warnings) as w:
        wait_for(lambda: values(data_dir, "out") or w.describe_status("flaky")["tasks"][0]["state"] == "FAILED",
                 timeout=20, what="the record or the task's failure")
        assert w.describe_status("flaky")["tasks"][0]["state"] == "RUNNING"
    assert values(data_dir, "out") == [b"hello"]
    polls = [m for m in warnings if "poll() failed, polling again" in m]
    assert len(polls) == 2 and "the source is not ready" in polls[0]
