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
