"""The Connect review's finding 3 (a source's poll() raising RetriableError is polled again, as Kafka's
AbstractWorkerSourceTask.poll does) and the split of finding 4 that needs no server (the rest of 4 and
findings 1 and 5 are in test_connect_postgres_restart.py)."""

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


def test_a_failed_logins_sqlstate_is_read_off_libpqs_message():
    """psycopg2 gives no SQLSTATE for a failed connect: the PostgreSQL source reads it off the message to tell
    a server not up yet (retried) from one that refused the login (the task fails)."""
    from klog.connect.connectors.postgres import _startup_sqlstate

    at = 'connection to server at "127.0.0.1", port 5432 failed: '
    assert _startup_sqlstate(at + "Connection refused\n\tIs the server running on that host?") is None
    assert _startup_sqlstate(at + "timeout expired\n") is None
    assert _startup_sqlstate('connection to server on socket "/tmp/.s.PGSQL.5432" failed: No such file') is None
    assert _startup_sqlstate(at + "FATAL:  the database system is starting up\n") == "57P03"
    assert _startup_sqlstate(at + "FATAL:  the database system is not yet accepting connections\n"
                             "DETAIL:  Consistent recovery state has not been yet reached.") == "57P03"
    assert _startup_sqlstate(at + "FATAL:  sorry, too many clients already\n") == "53300"
    assert _startup_sqlstate(at + 'FATAL:  password authentication failed for user "cdc"\n') == "28000"
    assert _startup_sqlstate('FATAL:  database "shop" does not exist\n') == "28000"  # libpq before 14
    assert _startup_sqlstate(at + "FATAL:  permission denied for database \"shop\"\n") == "28000"
