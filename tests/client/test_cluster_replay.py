"""`klog replay` with either side on a cluster (`klog serve` on 127.0.0.1, ephemeral port): the
same records, partitions and timestamps as the same replay on a local store."""

from __future__ import annotations

import pytest

from tests.cli.test_cluster_cli import envelopes, fill
from tests.cli.test_cluster_serve import precreate_without_create_topics


def ok(r) -> str:  # noqa: ANN001 - CompletedProcess
    assert r.returncode == 0, r.stderr
    return r.stderr.decode()


@pytest.mark.slow
def test_replay_local_to_cluster_to_local_matches_a_local_replay(kafka_server, klog_proc, tmp_path, data_dir):
    src, back = str(tmp_path / "src"), str(tmp_path / "back")
    fill(src, "orders", 600)
    ok(klog_proc("replay", "orders", "--to", "copy", "--keep-timestamps", "-d", src))  # the reference
    want = envelopes(src, "copy")
    precreate_without_create_topics(data_dir, "orders")
    # local SRC -> cluster DEST (the topic is created there with SRC's partition count)
    err = ok(klog_proc("replay", "orders", "--to", "copy", "--keep-timestamps", "-d", src,
                       "--to-store", kafka_server.bootstrap))
    assert err == "Replayed 600 records from orders into copy\n"
    assert envelopes(data_dir, "copy") == want
    # cluster SRC -> local DEST
    ok(klog_proc("replay", "copy", "--to", "copy", "--keep-timestamps", "-b", kafka_server.bootstrap,
                 "--to-store", back))
    assert envelopes(back, "copy") == want
    # cluster -> the same cluster
    ok(klog_proc("replay", "copy", "--to", "copy2", "--keep-timestamps", "-b", kafka_server.bootstrap))
    ok(klog_proc("replay", "copy", "--to", "copy2", "--keep-timestamps", "-d", src))
    assert envelopes(data_dir, "copy2") == envelopes(src, "copy2")


def test_replay_from_a_cluster_to_stdout_is_the_local_output(kafka_server, klog_proc, data_dir):
    fill(data_dir, "orders", 300)
    args = ("replay", "orders", "--json", "--tail", "20", "-p", "1")
    remote = klog_proc(*args, "-b", kafka_server.bootstrap)
    local = klog_proc(*args)
    assert remote.returncode == local.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout and remote.stdout.count(b"\n") == 20


@pytest.mark.slow
def test_replay_refusals_are_one_line(kafka_server, klog_proc, tmp_path, data_dir):
    src = str(tmp_path / "src")
    fill(src, "orders", 10)
    r = klog_proc("replay", "orders", "--to", "copy", "-d", src, "--to-store", kafka_server.bootstrap,
                  "--group", "g")
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and "--group needs a local DEST" in err
    r = klog_proc("replay", "orders", "-d", src, "--to-store", kafka_server.bootstrap)
    assert r.returncode == 2 and "--to-store needs --to" in r.stderr.decode()
    fill(data_dir, "orders", 10)
    r = klog_proc("replay", "orders", "--to", "orders", "-b", kafka_server.bootstrap)  # into itself
    assert r.returncode == 2 and "into itself" in r.stderr.decode()


@pytest.mark.slow
def test_replay_from_a_cluster_into_a_local_store_resumes_with_a_group(kafka_server, klog_proc, tmp_path, data_dir):
    back = str(tmp_path / "back")
    fill(data_dir, "orders", 200)
    args = ("replay", "orders", "-b", kafka_server.bootstrap, "--to", "o", "--to-store", back, "--group", "g",
            "--keep-timestamps")
    assert ok(klog_proc(*args)) == "Replayed 200 records from orders into o\n"
    fill(data_dir, "orders", 50, start=200)
    assert ok(klog_proc(*args)) == "Replayed 50 records from orders into o\n"  # only what is new
    assert [e[2:] for e in envelopes(back, "o")] == [e[2:] for e in envelopes(data_dir, "orders")]
    r = klog_proc("replay", "o", "--to", "o", "-d", back, "--to-store", back)  # the same store: into itself
    assert r.returncode == 2 and "into itself" in r.stderr.decode()
