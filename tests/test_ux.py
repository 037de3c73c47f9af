"""The everyday viewer and shell tool (issue 16): what a kcat, rpk or `tail -f` user sees."""

from __future__ import annotations

import os

import klog


def test_a_too_large_line_is_one_line_and_keeps_the_lines_before(cli, data_dir):
    big = b"x" * 1_100_000
    for lines in (big + b"\n", b"a\nb\n" + big + b"\nc\n"):
        topic = f"big{len(lines)}"
        r = cli("produce", topic, input=lines)
        assert r.exit_code == 1
        errors = [line for line in r.stderr.splitlines() if "created topic" not in line]
        assert len(errors) == 1 and "larger than max.message.bytes" in errors[0], r.stderr
        assert "Traceback" not in r.stderr
        with klog.open(data_dir) as s:
            assert [x.value for x in s.consumer(topic)] == lines.split(big)[0].split(b"\n")[:-1]


def test_create_if_not_exists_says_it_exists_and_warns_on_a_difference(cli):
    assert cli("topics", "create", "orders", "-p", "3").exit_code == 0
    r = cli("topics", "create", "orders", "-p", "3", "--if-not-exists")
    assert r.exit_code == 0 and "already exists (3 partitions" in r.stderr and "Created" not in r.stderr
    assert "warning" not in r.stderr
    r = cli("topics", "create", "orders", "-p", "6", "--if-not-exists")
    assert r.exit_code == 0 and "already exists (3 partitions" in r.stderr
    assert "warning: topic orders differs from the request (6 partitions)" in r.stderr


def test_dump_of_a_new_partition_folder_path_is_empty_not_an_error(cli, data_dir):
    assert cli("topics", "create", "orders").exit_code == 0
    with klog.open(data_dir) as s:
        log_dir = s.data_dir.log_dir_path(s.log_dir_ids()[0])
    for path in (os.path.join(log_dir, "orders-0"), "orders-0", "orders"):
        r = cli("dump", path)
        assert (r.exit_code, r.stdout, r.stderr) == (0, b"", ""), path


def test_consume_without_a_topic_is_a_usage_error(cli, data_dir):
    cli("topics", "create", "t")
    r = cli("consume")
    assert r.exit_code == 2 and "give a topic" in r.stderr
