"""The range options consume and replay share (-o, --since, --until, --tail, --last): one parser,
klog.client.timespec.parse_range, gives both the same StartSpec and the same errors."""

from __future__ import annotations

import pytest

from klog.client.consumer import StartSpec
from klog.client.timespec import parse_range
from klog.errors import UsageError


@pytest.mark.parametrize(("kwargs", "start"), [
    ({}, StartSpec("beginning")),
    ({"offset": "end"}, StartSpec("end")),
    ({"offset": "-5"}, StartSpec("relative", -5)),
    ({"offset": "7"}, StartSpec("offset", 7)),
    ({"since": "1000"}, StartSpec("timestamp", 1000)),
    ({"tail": 3}, StartSpec("tail", 3)),
    ({"last": 4, "with_last": True}, StartSpec("tail", 4)),
])
def test_start_options(kwargs, start):
    assert parse_range(**kwargs) == (start, None)


def test_until():
    assert parse_range(until="2000") == (StartSpec("beginning"), 2000)


def test_one_start_option_named_as_each_command_has_them():
    with pytest.raises(UsageError, match="^use only one of --offset, --since and --tail$"):
        parse_range(offset="end", tail=1)
    with pytest.raises(UsageError, match="^use only one of --offset, --since, --tail and --last$"):
        parse_range(since="1", last=1, with_last=True)
    with pytest.raises(UsageError, match="^use only one of --offset and --since$"):
        parse_range(offset="end", since="1", with_tail=False)  # spark export
    with pytest.raises(UsageError, match="--tail needs a count of 0 or more"):
        parse_range(tail=-1)


def test_consume_and_replay_say_the_same(cli):
    cli("topics", "create", "t")
    for command in (["consume", "t"], ["replay", "t"]):
        r = cli(*command, "-o", "end", "--tail", "2")
        assert r.exit_code == 2
        assert "use only one of --offset, --since" in r.stderr


@pytest.mark.slow
def test_replay_range_options_to_stdout_and_into_a_topic(klog_proc, data_dir):
    lines = b"".join(b'{"value": "%s", "timestamp": %d}\n' % (v, ts)
                     for v, ts in ((b"a", 1000), (b"b", 2000), (b"c", 3000), (b"d", 4000)))
    assert klog_proc("produce", "src", "--input", "json", input=lines).returncode == 0

    def replay(*args: str) -> list[str]:
        r = klog_proc("replay", "src", *args)
        assert r.returncode == 0, r.stderr
        return r.stdout.decode().splitlines()

    assert replay("--since", "2000", "--until", "4000") == ["b", "c"]  # --until excludes its time
    assert replay("--since", "1970-01-01T00:00:03Z") == ["c", "d"]
    assert replay("-o", "1", "-n", "2") == ["b", "c"]
    assert replay("-o", "-1") == ["d"]
    assert replay("--tail", "2") == ["c", "d"]
    assert replay("--until", "1s") == ["a", "b", "c", "d"]  # a span: that long ago

    both = klog_proc("replay", "src", "-o", "1", "--since", "2000")
    assert both.returncode == 2 and b"use only one of" in both.stderr
    bad = klog_proc("replay", "src", "--since", "yesterday")
    assert bad.returncode == 2 and bad.stderr.decode().count("\n") == 1 and b"invalid time" in bad.stderr

    into = klog_proc("replay", "src", "--to", "dst", "--since", "3000", "--keep-timestamps")
    assert into.returncode == 0, into.stderr
    got = klog_proc("consume", "dst", "-F", "%T %s\n").stdout.decode().splitlines()
    assert got == ["3000 c", "4000 d"]
