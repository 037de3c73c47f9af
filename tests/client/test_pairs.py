"""klog.client.pairs.parse_pairs: the one reading of name=value options (--config, -X, --property, --conf)."""

from __future__ import annotations

import pytest

from klog.client.pairs import parse_pairs
from klog.errors import UsageError


def test_pairs_later_wins_and_values_stripped_unless_kept():
    assert parse_pairs(["a=1", " b = x=y ", "a=2"], "--config") == {"a": "2", "b": "x=y"}
    assert parse_pairs(["sasl.password= p "], "-X", strip_values=False) == {"sasl.password": " p "}
    assert parse_pairs(None, "--config") == {}


@pytest.mark.parametrize("bad", ["novalue", "=v", " =v"])
def test_a_pair_without_name_or_equals_names_the_option(bad):
    with pytest.raises(UsageError, match=f"^invalid --conf '{bad}': use KEY=VALUE$"):
        parse_pairs([bad], "--conf", "KEY=VALUE")


def test_the_commands_say_the_same(cli):
    r = cli("topics", "create", "t", "--config", "retention.ms")
    assert r.exit_code == 2 and "invalid --config 'retention.ms': use name=value" in r.stderr
    r = cli("consume", "t", "--group", "g", "-X", "nonsense")
    assert r.exit_code == 2 and "invalid --property 'nonsense': use name=value" in r.stderr
