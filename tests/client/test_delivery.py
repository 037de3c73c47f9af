"""klog.client.delivery through the Python API: what `consume --group/--exec` runs, without the CLI.

Goal: offsets are committed only for records handed to the output whole (or whose command exited 0),
and an output that breaks mid-write commits nothing more. tests/test_groups_cli.py covers the CLI.
"""

from __future__ import annotations

import io

import pytest

from klog.client.delivery import deliver
from klog.client.groups_admin import describe_group
from klog.errors import KlogError


def fill(store, topic: str, n: int) -> None:
    store.create_topic(topic, partitions=1)
    with store.producer() as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=0)


def committed(store, group: str) -> dict[tuple[str, int], int | None]:
    return {(p.topic, p.partition): p.committed for p in describe_group(store, group).partitions}


def test_values_written_whole_are_committed(store):
    fill(store, "t", 5)
    out = io.BytesIO()
    deliver(store, ["t"], group="g", out=out)
    assert out.getvalue() == b"v0\nv1\nv2\nv3\nv4\n"
    assert committed(store, "g") == {("t", 0): 5}


def test_rendered_lines_and_count(store):
    fill(store, "t", 5)
    out = io.BytesIO()
    deliver(store, ["t"], group="g", out=out, count=2, line=lambda r: b"%d:%s\n" % (r.offset, r.value))
    assert out.getvalue() == b"0:v0\n1:v1\n"
    assert committed(store, "g") == {("t", 0): 2}


class ShortWriter(io.BytesIO):
    """An output whose reader went away: every write takes one byte less than given."""

    def write(self, data) -> int:  # noqa: ANN001
        return max(0, super().write(bytes(data)[:-1]))


def test_short_write_commits_nothing(store):
    fill(store, "t", 3)
    with pytest.raises(BrokenPipeError):
        deliver(store, ["t"], group="g", out=ShortWriter())
    assert committed(store, "g").get(("t", 0)) is None


def test_exec_failure_commits_only_what_succeeded(store, tmp_path):
    fill(store, "t", 4)
    script = f"cat >> {tmp_path}/seen; echo >> {tmp_path}/seen; test $KLOG_OFFSET -lt 2"
    with pytest.raises(KlogError, match="exited 1 at t-0 offset 2; it and later records are not committed"):
        deliver(store, ["t"], group="g", exec_cmd=script, out=io.BytesIO())
    assert (tmp_path / "seen").read_bytes() == b"v0\nv1\nv2\n"
    assert committed(store, "g") == {("t", 0): 2}


def test_needs_a_group_or_a_reader(store):
    with pytest.raises(ValueError, match="group or a reader"):
        deliver(store, ["t"], exec_cmd="true")


def test_exported_from_the_package():
    import klog
    from klog.client.groups_admin import ResetSpec

    assert klog.deliver is deliver and klog.ResetSpec is ResetSpec
