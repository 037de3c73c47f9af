"""`klog mirror` and `klog replay` and transactions in the source: what DEST's readers get.

A mirror (and a replay) read its source at read_uncommitted and wrote what it read outside any transaction (or, with
--exactly-once, inside DEST transactions that then committed): records the source's producers had
aborted, and those of a transaction still open, became committed records in DEST, shown to DEST's
read_committed readers where the source's never show them. The source is now read at read_committed
unless --isolation-level read_uncommitted asks for a raw copy.
"""

from __future__ import annotations

import pytest
from test_cli import assert_one_line_error

import klog
from klog.client.mirror import Mirror
from klog.errors import UsageError


def _values(path: str, level: str) -> list[bytes]:
    with klog.open(path, create=False) as store:
        return [r.value for r in store.consumer("t", isolation_level=level, merge=False)]


def _source(path: str):  # noqa: ANN202 - the store and its producer with a transaction left open
    store = klog.open(path)
    store.create_topic("t", partitions=1)
    with store.producer() as plain:
        plain.send("t", b"before")
    producer = store.producer(transactional_id="tx1")
    producer.begin()
    producer.send("t", b"aborted")
    producer.flush()  # (written, then aborted: the log holds it)
    producer.abort()
    producer.begin()
    producer.send("t", b"committed")
    producer.commit()
    producer.begin()
    producer.send("t", b"open")
    producer.flush()
    return store, producer


@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_mirror_copies_committed_records_only_and_an_open_transaction_once_it_commits(tmp_path, exactly_once):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    store, producer = _source(src)
    try:
        with klog.open(dst) as dest:
            stats = Mirror(store, dest, ["t"], mirror_id="m", exactly_once=exactly_once).run()
        assert stats.records == 2
        assert _values(dst, "read_committed") == _values(dst, "read_uncommitted") == [b"before", b"committed"]
        producer.commit()  # the open transaction commits: the next run copies it, and nothing twice
        with klog.open(dst) as dest:
            stats = Mirror(store, dest, ["t"], mirror_id="m", exactly_once=exactly_once).run()
        assert stats.records == 1
        assert _values(dst, "read_committed") == [b"before", b"committed", b"open"]
    finally:
        producer.close()
        store.close()


def test_read_uncommitted_copies_every_record_written(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    store, producer = _source(src)
    try:
        with klog.open(dst) as dest:
            Mirror(store, dest, ["t"], mirror_id="m", isolation_level="read_uncommitted").run()
        assert _values(dst, "read_uncommitted") == [b"before", b"aborted", b"committed", b"open"]
    finally:
        producer.close()
        store.close()


def test_an_aborted_transaction_at_the_end_is_stepped_over_once(tmp_path):
    """The position passes the aborted records and the marker: a second run copies nothing."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with klog.open(src) as store:
        store.create_topic("t", partitions=2)
        with store.producer() as plain:
            plain.send_keyed("t", [(b"k%d" % i, b"v%d" % i) for i in range(10)])
        with store.producer(transactional_id="tx") as producer:
            producer.begin()
            producer.send_keyed("t", [(b"k%d" % i, b"aborted") for i in range(10)])
            producer.flush()
            producer.abort()
        for _ in range(2):
            with klog.open(dst) as dest:
                stats = Mirror(store, dest, ["t"], mirror_id="m").run()
            assert stats.records == (10 if _ == 0 else 0)
    assert sorted(_values(dst, "read_uncommitted")) == sorted(b"v%d" % i for i in range(10))


def test_exactly_once_of_uncommitted_records_is_refused(tmp_path):
    with klog.open(str(tmp_path / "s")) as store, pytest.raises(UsageError, match="committed records only"):
        Mirror(store, store, ["t"], mirror_id="m", rename="c.{topic}", exactly_once=True,
               isolation_level="read_uncommitted")


def test_the_cli_refuses_contradicting_isolation_settings_before_opening_anything(cli, data_dir, tmp_path):
    dest = str(tmp_path / "never")
    cases = [
        (["--exactly-once", "--isolation-level", "read_uncommitted"], "committed records only"),
        (["--isolation-level", "read_committed", "--source-property", "isolation.level=read_uncommitted"],
         "--isolation-level read_committed contradicts --source-property isolation.level=read_uncommitted"),
        (["--isolation-level", "committed"], "invalid isolation level 'committed'"),
    ]
    for args, said in cases:
        assert_one_line_error(cli("mirror", data_dir, dest, "t", *args), 2, said)
    assert not (tmp_path / "never").exists()


def test_a_replay_skips_aborted_records_and_resumes_into_a_transaction_once_it_commits(tmp_path):
    store, producer = _source(str(tmp_path / "src"))
    try:
        def replay(**kwargs) -> int:  # noqa: ANN003
            replayer = store.replayer("t", kwargs.pop("dest", "u"), **kwargs)
            try:
                return replayer.run().records
            finally:
                replayer.close()

        assert replay(group="g") == 2
        assert replay(dest="raw", isolation_level="read_uncommitted") == 4
        producer.commit()
        assert replay(group="g") == 1  # the rest, once committed; nothing twice
        with store.consumer("u", isolation_level="read_committed") as consumer:
            assert [r.value for r in consumer] == [b"before", b"committed", b"open"]
        with store.consumer("raw") as consumer:
            assert [r.value for r in consumer] == [b"before", b"aborted", b"committed", b"open"]
    finally:
        producer.close()
        store.close()


def test_the_replay_command_takes_an_isolation_level(cli):
    cli("produce", "t", input=b"a\n")
    assert_one_line_error(cli("replay", "t", "--to", "u", "--isolation-level", "committed"), 2,
                          "isolation.level must be read_uncommitted or read_committed, not 'committed'")
