"""`klog replay` reviewed as a kcat user would run it: from a `klog serve` cluster whose transactional
producer (confluent-kafka) aborted one transaction and left one open, to stdout (--json) and resumed
with --group; and a --group resumed after its source topic was deleted and recreated."""

from __future__ import annotations

import json

import pytest
from test_cli import assert_one_line_error

import klog
from tests.cli.copy_sources import t_recreated_after, transactions

ck = pytest.importorskip("confluent_kafka")


@pytest.mark.slow
def test_a_group_resumed_after_its_source_topic_was_recreated_replays_the_new_topic(cli, tmp_path):
    """The group's progress (offset 5) is past the new topic's end (3): the rerun skipped the new
    records for good, and said 'Replayed 0 records'. It now replays them, saying why."""
    src = str(tmp_path / "src")
    t_recreated_after(src, lambda: cli("replay", "t", "--to", "u", "--group", "g", "-d", src))
    r = cli("replay", "t", "--to", "u", "--group", "g", "-d", src)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.splitlines() == [
        "klog: warning: replay group 'g': its progress in t-0 (offset 5) is past the partition's end (3): the topic "
        "was recreated or truncated; replaying it from the start",
        "Replayed 3 records from t into u"]
    r = cli("replay", "t", "--to", "u", "--group", "g", "-d", src)  # and resumed exactly from there on
    assert r.exit_code == 0 and r.stderr == "Replayed 0 records from t into u\n", r.stderr
    with klog.open(src) as store:
        assert [r.value for r in store.consumer("u")] == [b"old%d" % i for i in range(5)] + [b"new%d" % i
                                                                                              for i in range(3)]


@pytest.mark.slow
def test_replay_from_a_cluster_reads_committed_records_and_resumes_into_a_transaction_once_it_commits(
        kafka_server, cli, tmp_path):
    b, dest = kafka_server.bootstrap, str(tmp_path / "dest")
    assert cli("topics", "create", "t", "-b", b).exit_code == 0
    plain = ck.Producer({"bootstrap.servers": b})
    plain.produce("t", b"before")
    plain.flush(10)
    producer = transactions(b, "t", (b"aborted", "abort"), (b"committed", "commit"), (b"open", "open"))

    def values(r) -> list[str]:  # noqa: ANN001
        assert r.exit_code == 0, r.stderr
        return [json.loads(line)["value"] for line in r.out.splitlines()]

    assert values(cli("replay", "t", "-b", b, "--json")) == ["before", "committed"]
    assert values(cli("replay", "t", "-b", b, "--json", "--isolation-level", "read_uncommitted")) == [
        "before", "aborted", "committed", "open"]
    replay = ["replay", "t", "-b", b, "--to", "u", "--to-store", dest, "--group", "g"]
    r = cli(*replay)
    assert r.exit_code == 0 and r.stderr == "Replayed 2 records from t into u\n", r.stderr
    producer.commit_transaction(10)
    r = cli(*replay)
    assert r.exit_code == 0 and r.stderr == "Replayed 1 records from t into u\n", r.stderr
    with klog.open(dest, create=False) as store:
        assert [r.value for r in store.consumer("u", isolation_level="read_uncommitted")] == [
            b"before", b"committed", b"open"]


@pytest.mark.slow
def test_an_isolation_level_contradicting_the_clusters_property_is_refused(kafka_server, cli, tmp_path):
    """The cluster's -X isolation.level (or a named cluster's) is what its reader uses: a contradicting
    --isolation-level was silently overruled (read_committed asked, aborted records replayed)."""
    b, dest = kafka_server.bootstrap, str(tmp_path / "never")
    assert cli("topics", "create", "t", "-b", b).exit_code == 0
    for flag, prop in (("read_committed", "read_uncommitted"), ("read_uncommitted", "read_committed")):
        assert_one_line_error(cli("replay", "t", "-b", b, "-X", f"isolation.level={prop}", "--isolation-level", flag,
                                  "--to", "u", "--to-store", dest), 2,
                              f"--isolation-level {flag} contradicts the cluster's property isolation.level={prop}")
    assert cli("clusters", "add", "c", "-b", b, "-X", "isolation.level=read_uncommitted").exit_code == 0
    assert_one_line_error(cli("replay", "t", "--cluster", "c", "--isolation-level", "read_committed", "--json"), 2,
                          "contradicts the cluster's property isolation.level=read_uncommitted")
    assert not (tmp_path / "never").exists()
