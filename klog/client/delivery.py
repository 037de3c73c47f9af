"""At-least-once delivery to a stream or a command: what `klog consume --group` and `--exec` run.

A group member's offsets are committed only for records already flushed to the output whole, or whose
command (`exec_cmd`, run with `sh -c`) exited 0: at-least-once from the shell. A short write or a failed
flush means the reader went away mid-record: nothing more is committed, the next owner redoes it.

    with Store() as store:
        deliver(store, ["orders"], group="billing", exec_cmd="./bill.sh", batch=100)

Works the same against a local store and a cluster (RemoteStore): both give `group_consumer`.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO, TextIO

from klog.client.record_writer import WRITE_CHUNK_BYTES, value_line
from klog.client.records import Record
from klog.errors import log_warning

if TYPE_CHECKING:
    from klog.client.interface import AnyStore

COMMIT_INTERVAL_MS = 1000  # the output is flushed and offsets committed at least this often while records flow

TP = tuple[str, int]
Line = Callable[[Record], bytes]


def deliver(store: AnyStore, topics: list[str], *, group: str | None = None,
            properties: dict[str, str] | None = None, line: Line | None = None, follow: bool = False,
            count: int | None = None, record_filter: Callable[[Record], bool] | None = None,
            exec_cmd: str | None = None, batch: int = 1, reader: Iterable[Record] | None = None,
            flush_each_fetch: bool = False, out: BinaryIO | None = None, text_out: TextIO | None = None,
            on_warning: Callable[[str], None] | None = None, decode: Callable[[Record], Record] | None = None) -> None:
    """Read `topics` as a member of `group` (or, for `exec_cmd` without a group, the records of `reader`)
    and hand them to `out` (default stdout) or to `exec_cmd` per `batch` records.

    `line` renders a record; None writes each value alone on a line (straight from the batches when no
    filter, count or command needs Records). `properties` are the group member's settings (GroupConfig
    names). `flush_each_fetch` flushes after every fetch (a terminal; -f always does). `text_out` is the
    text layer over `out` flushed before it (stdout's). Raises KlogError when the command exits non-zero
    (the records from its batch on stay uncommitted) and UnknownTopicError when a followed topic is deleted.
    `decode` turns each record into what the filter, the output and the command get (consume -s); a
    record it raises on stops the delivery there, uncommitted.
    """
    if out is None:
        out, text_out = sys.stdout.buffer, sys.stdout
    sink = _Sink(out, text_out)
    written = sink.written  # next offset per partition, for records out of our hands
    warn = on_warning or getattr(store, "warn", None) or log_warning
    consumer = None

    def commit_written(tps: list | None = None) -> None:
        if sink.failed:  # the output broke: what `written` names may never have arrived (close() calls this too)
            return
        sink.flush()
        offsets = {tp: written.pop(tp) for tp in list(written) if tps is None or tp in tps}
        # a partition nothing was written from yet commits where auto.offset.reset started it, as Kafka's
        # consumer does: `-o end` with nothing new, then a run without -o, starts at that end, not earliest
        reset_positions = getattr(consumer, "reset_positions", None)  # (klog's own group consumer)
        for tp, offset in (reset_positions() if reset_positions is not None else {}).items():
            if tps is None or tp in tps:
                offsets.setdefault(tp, offset)
        if offsets and consumer is not None:
            from klog.errors import GroupFencedError

            try:
                consumer.commit(offsets)
            except GroupFencedError as e:  # expelled while stalled: it rejoins; the new owner redoes these
                warn(str(e))

    interval_ms = COMMIT_INTERVAL_MS
    if group is not None:
        from klog.client.group import GroupConfig

        config = GroupConfig.from_properties(properties or {})
        interval_ms = min(config.auto_commit_interval_ms, COMMIT_INTERVAL_MS)
        config.enable_auto_commit = False  # we commit ourselves, after the output is safe
        consumer = store.group_consumer(group, *topics, config=config, follow=follow, on_revoke=commit_written)
    elif reader is None:
        raise ValueError("deliver needs a group or a reader")
    watch = _TopicWatch(store, topics) if consumer is not None and follow else None
    try:
        if (consumer is not None and line is None and not exec_cmd and record_filter is None and count is None
                and decode is None):
            _copy_values(consumer, sink, follow, interval_ms, commit_written, watch)
        else:
            chunks = consumer.batches(timeout_ms=interval_ms) if consumer is not None else _chunked(reader, batch)
            if exec_cmd:
                emit = _exec_emitter(exec_cmd, batch, sink, commit_written, consumer is not None)
            else:
                emit = _output_emitter(sink, line or value_line, follow or flush_each_fetch)
            _copy_records(consumer, chunks, emit, count, record_filter, interval_ms, commit_written, watch, decode)
        commit_written()
    finally:
        if consumer is not None:
            consumer.close()  # on_revoke commits what was written; then it leaves the group


class _Sink:
    """The output of records whose offsets get committed. A short write counts as a broken pipe (the
    reader went away mid-write: BufferedWriter then returns a count instead of raising), and once a
    write or flush fails `written` is cleared and `failed` set: nothing more is committed."""

    def __init__(self, raw: BinaryIO, text: TextIO | None) -> None:
        self.raw = raw
        self.text = text
        self.written: dict[TP, int] = {}
        self.failed = False

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Around anything that writes to the output: on an error, forget what counts as written."""
        try:
            yield
        except Exception:
            self.failed = True
            self.written.clear()
            raise

    def write(self, data: bytes) -> None:
        with self.guard():
            view = memoryview(data)  # bounded chunks: CPython's write can return short past 2 GiB
            for at in range(0, len(view), WRITE_CHUNK_BYTES):
                chunk = view[at:at + WRITE_CHUNK_BYTES]
                n = self.raw.write(chunk)
                if n is not None and n < len(chunk):
                    raise BrokenPipeError(errno.EPIPE, f"stdout took {n} of {len(chunk)} bytes: the reader went away")

    def flush(self) -> None:
        with self.guard():
            if self.text is not None:
                self.text.flush()  # the text layer (a terminal's rich output) first, then the bytes
            self.raw.flush()


def _chunked(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    """--exec without --group: lists of `size` records (with -f a short batch waits for more)."""
    it = iter(records)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class _TopicWatch:
    """A following group member whose topic is deleted (or deleted and created again) stops with one
    line and exit 1 instead of waiting forever: checked when a poll comes back empty, every 0.5 s."""

    INTERVAL_S = 0.5

    def __init__(self, store, topics: list[str]) -> None:  # noqa: ANN001
        self.store = store
        self.ids = {t: store.topic(t).topic_id for t in topics}
        self.next = time.monotonic() + self.INTERVAL_S

    def check(self) -> None:
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + self.INTERVAL_S
        from klog.errors import UnknownTopicError

        for name, topic_id in self.ids.items():
            self.store.forget_topic_metadata(name)  # the store's (or cluster's) metadata now, not a cached copy
            try:
                meta = self.store.topic(name)
            except UnknownTopicError:
                meta = None
            if meta is None or meta.topic_id != topic_id:
                raise UnknownTopicError(f"topic '{name}' was deleted while being followed"
                                        + (" (and created again: read it anew)" if meta is not None else ""))


def _copy_values(consumer, sink: _Sink, follow: bool, interval_ms: int,  # noqa: ANN001
                 commit_written: Callable[[], None], watch: _TopicWatch | None = None) -> None:
    """Values only, one per line, straight from the batches (what plain `klog consume` does too); a
    partition counts as written only once its values were handed to the output whole."""
    last_commit = time.monotonic()
    for chunks in consumer.value_batches(timeout_ms=interval_ms):
        if not chunks and watch is not None:
            watch.check()
        for tp, values, next_offset in chunks:
            if values:
                if None in values:
                    values = [v or b"" for v in values]
                values.append(b"")  # the last line's newline, without copying the joined chunk
                sink.write(b"\n".join(values))
            sink.written[tp] = next_offset
        if follow:
            sink.flush()
        if time.monotonic() - last_commit >= interval_ms / 1000:
            commit_written()
            last_commit = time.monotonic()


def _copy_records(consumer, chunks: Iterable[list[Record]], emit, count: int | None,  # noqa: ANN001
                  record_filter, interval_ms: int, commit_written: Callable[[], None],  # noqa: ANN001
                  watch: _TopicWatch | None = None, decode: Callable[[Record], Record] | None = None) -> None:
    last_commit = time.monotonic()
    emitted = 0
    for records in chunks:
        if not records and watch is not None:
            watch.check()
        epoch = consumer.rebalances if consumer is not None else 0
        for r in records:
            if consumer is not None and consumer.rebalances != epoch:
                break  # a commit rebalanced us: the rest may be someone else's now
            if decode is not None:
                try:
                    r = decode(r)
                except Exception:
                    emit(None, False)  # those before it are written (and may be committed), it and later ones not
                    raise
            show = record_filter is None or record_filter(r)
            emit(r, show)
            emitted += show
            if count is not None and emitted >= count:
                break
        emit(None, False)  # end of a fetch: write out (or run the partial --exec batch)
        if count is not None and emitted >= count:
            break
        if consumer is not None and time.monotonic() - last_commit >= interval_ms / 1000:
            commit_written()
            last_commit = time.monotonic()


def _output_emitter(sink: _Sink, line: Line, flush_each_fetch: bool):  # noqa: ANN202
    """Buffer rendered records, write them per fetch; a record counts as written once its bytes were
    handed to the output whole (its offset is committed only after commit_written flushes it)."""
    buf: list[bytes] = []
    marks: dict[TP, int] = {}  # next offset per partition once `buf` is written

    def emit(r: Record | None, show: bool) -> None:  # r None: end of a fetch
        if r is None:
            sink.write(b"".join(buf))
            buf.clear()
            sink.written.update(marks)
            marks.clear()
            if flush_each_fetch:
                sink.flush()
            return
        if show:
            buf.append(line(r))
        marks[(r.topic, r.partition)] = r.offset + 1

    return emit


def _exec_emitter(cmd: str, batch: int, sink: _Sink, commit_written: Callable[[], None],  # noqa: ANN202
                  committing: bool):
    """Run CMD per `batch` records (values on stdin, one per line for batches); commit after each exit 0.
    Records a filter leaves out count as done once nothing before them in their partition is pending."""
    import errno
    import os
    import signal
    import subprocess

    from klog.errors import KlogError

    written = sink.written
    pending: list[Record] = []
    pending_tps: set[TP] = set()
    skipped: dict[TP, int] = {}  # filtered out behind a pending record: done when it is

    def run() -> None:
        first = pending[0]
        stdin = (first.value or b"") if batch == 1 else b"".join((r.value or b"") + b"\n" for r in pending)
        env = {**os.environ, "KLOG_TOPIC": first.topic, "KLOG_PARTITION": str(first.partition),
               "KLOG_OFFSET": str(first.offset), "KLOG_COUNT": str(len(pending))}
        sink.flush()
        code = subprocess.run(cmd, shell=True, input=stdin, env=env).returncode
        if code != 0:
            commit_written()
            if code in (128 + signal.SIGPIPE, -signal.SIGPIPE):
                # died writing to a closed pipe: when that is klog's stdout (`| head -1`), the output's end,
                # as for klog's own writes (the CLI's pipe_safe tells which; else this one line)
                raise BrokenPipeError(errno.EPIPE, f"--exec command: broken pipe at {first.topic}-{first.partition} "
                                                   f"offset {first.offset}")
            where = f"--exec command exited {code} at {first.topic}-{first.partition} offset {first.offset}"
            raise KlogError(where + ("; it and later records are not committed, so a rerun starts there"
                                     if committing else ""))
        for r in pending:
            written[(r.topic, r.partition)] = r.offset + 1
        for tp, after in skipped.items():
            written[tp] = max(written.get(tp, 0), after)
        pending.clear()
        pending_tps.clear()
        skipped.clear()
        commit_written()

    def emit(r: Record | None, show: bool) -> None:  # r None: end of a fetch, run what is pending
        if r is not None:
            tp = (r.topic, r.partition)
            if show:
                pending.append(r)
                pending_tps.add(tp)
            elif tp in pending_tps:
                skipped[tp] = r.offset + 1
            else:
                written[tp] = r.offset + 1
        if pending and (r is None or len(pending) >= batch):
            run()

    return emit
