"""klog serve notices a topic another process deleted by comparing LMDB's last commit id with the
one its last look saw. LMDB publishes a commit's id (what last_write reads) a moment before new
read transactions see the commit: a look made in that moment must record what it read, or the
deleted topic is served from its old files until the next metadata write (a `consume -f -b`
that never ends)."""

from __future__ import annotations

import klog
from klog.broker.batches import RawAppender
from klog.errors import UnknownTopicError


def _delete_commits(data_dir: str) -> int:
    """How many LMDB commits a topic delete makes (a throwaway topic's)."""
    with klog.open(data_dir) as s:
        s.create_topic("probe", 1)
        before = s.meta.last_write()
        s.delete_topic("probe")
        return s.meta.last_write() - before


def test_a_look_between_a_deletes_commit_id_and_its_snapshot_still_sees_the_delete_next(data_dir):
    commits = _delete_commits(data_dir)
    with klog.open(data_dir) as served:
        served.create_topic("gone", 1)
        with served.producer() as p:
            p.send("gone", b"x")
        appender = RawAppender(served)
        appender.partition("gone", 0)
        real_last_write = served.meta.last_write
        # the look happens after the delete's commit id is out, before its snapshot is readable:
        # last_write already says what it will say once the delete is done; the lookup finds the topic
        served.meta.last_write = lambda: real_last_write() + commits  # type: ignore[method-assign]
        appender.check_topic("gone")
        served.meta.last_write = real_last_write  # type: ignore[method-assign]
        with klog.open(data_dir) as other:  # (the same LMDB environment: commits count the same)
            other.delete_topic("gone")
        appender.check_topic("gone")
        try:
            part = appender.partition("gone", 0, refresh=False)
        except UnknownTopicError:
            return
        raise AssertionError(f"the deleted topic is still served from {part.leader.directory}")
