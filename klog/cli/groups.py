"""`klog groups list|describe|reset-offsets|delete|delete-offsets` (like kafka-consumer-groups)."""

from __future__ import annotations

import contextlib
import errno
import json
import sys
import time
from collections.abc import Iterator
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store
from klog.errors import UsageError

app = typer.Typer(help="List, describe (lag), reset offsets of, and delete consumer groups. Groups of Kafka "
                  "clients served by klog serve are included.", no_args_is_help=True)

TopicScopeOpt = Annotated[list[str] | None, typer.Option(
    "--topic", "-t", help="TOPIC or TOPIC:P[,P...] (repeatable).")]


def _dash(value: object) -> object:
    return "-" if value is None else value


@app.command("list")
def list_(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every group: state (Stable, PreparingRebalance, Empty), live members, generation, assignor, topics."""
    from klog.client.groups_admin import list_groups

    with open_store(data_dir, create=False) as store:
        groups = list_groups(store)
    if as_json:
        for g in groups:
            print(json.dumps(vars(g)))
        return
    from klog.cli.tables import print_table

    print_table(["GROUP", "STATE", "MEMBERS", "GENERATION", "ASSIGNOR", "TOPICS"],
                [[g.group, g.state, g.members, g.generation, _dash(g.assignor), ",".join(g.topics) or "-"]
                 for g in groups])


@app.command()
def describe(
    group: str,
    members: Annotated[bool, typer.Option("--members", help="List the live members instead of partitions.")] = False,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per partition: committed offset, log start, log end, lag, and the member reading it (host, pid; for a
    Kafka client of klog serve, the client's address and the server's pid)."""
    from klog.client.groups_admin import describe_group

    with open_store(data_dir, create=False) as store:
        d = describe_group(store, group)
    if as_json:
        doc = {"group": d.group, "state": d.state, "generation": d.generation, "assignor": d.assignor,
               "members": [vars(m) for m in d.members], "partitions": [vars(p) for p in d.partitions]}
        print(json.dumps(doc))
        return
    from klog.cli.output import terminal_safe
    from klog.cli.tables import print_table

    print(f"group {terminal_safe(d.group.encode())}: {d.state}, generation {_dash(d.generation)}, "
          f"assignor {_dash(d.assignor)}, {len(d.members)} live member(s)", file=sys.stderr)
    if members:
        print_table(["MEMBER", "CLIENT-ID", "HOST", "PID", "PARTITIONS"],
                    [[m.member_id, m.client_id, m.host, m.pid, ",".join(f"{t}-{p}" for t, p in m.partitions) or "-"]
                     for m in d.members])
        return
    print_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-START", "LOG-END", "LAG", "MEMBER", "HOST", "PID"],
                [[p.topic, p.partition, _dash(p.committed), p.log_start, p.log_end, _dash(p.lag),
                  _dash(p.member_id), _dash(p.host), _dash(p.pid)] for p in d.partitions])


def _reset_spec(to_earliest: bool, to_latest: bool, to_offset: int | None, to_datetime: str | None,
                by_duration: str | None, shift_by: int | None, to_current: bool):  # noqa: ANN202 - ResetSpec
    from klog.client.groups_admin import ResetSpec
    from klog.client.timespec import parse_span_ms, parse_time_ms

    chosen = [name for name, v in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                   ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime),
                                   ("--by-duration", by_duration), ("--shift-by", shift_by is not None),
                                   ("--to-current", to_current)) if v]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                         "--by-duration, --shift-by, --to-current" + (f" (got {', '.join(chosen)})" if chosen else ""))
    if to_offset is not None:
        return ResetSpec("offset", to_offset)
    if to_datetime is not None:
        return ResetSpec("datetime", parse_time_ms(to_datetime))
    if by_duration is not None:
        return ResetSpec("duration", parse_span_ms(by_duration))
    if shift_by is not None:
        return ResetSpec("shift", shift_by)
    return ResetSpec("earliest" if to_earliest else "latest" if to_latest else "current")


@app.command("reset-offsets", help="Move a group's committed offsets: a dry run prints the plan, --execute "
             "applies it (refused while the group has live members); new offsets stay between the log start and "
             "the log end.")
def reset_offsets(
    group: str,
    topic: TopicScopeOpt = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Every topic the group has offsets for or its "
                                             "live members read.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="To the log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="To the log end (skip everything).")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="To offset N.")] = None,
    to_datetime: Annotated[str | None, typer.Option("--to-datetime", help="To the first record at or after a "
                                                                          "time (ISO, epoch ms).")] = None,
    by_duration: Annotated[str | None, typer.Option("--by-duration", help="To the first record of D ago "
                                                                          "(90s, 15m, 2h, 7d).")] = None,
    shift_by: Annotated[int | None, typer.Option("--shift-by", help="Move the committed offset by N (+/-).")] = None,
    to_current: Annotated[bool, typer.Option("--to-current", help="To the committed offset (log end if none).")]
    = False,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: dry run, print it).")] = False,
    export: Annotated[bool, typer.Option("--export", help="Print the plan as CSV: topic,partition,offset.")] = False,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    from klog.client.groups_admin import execute_reset, live_members, plan_reset

    spec = _reset_spec(to_earliest, to_latest, to_offset, to_datetime, by_duration, shift_by, to_current)
    live = []
    with open_store(data_dir, create=False) as store:
        plan = plan_reset(store, group, spec, topic or [], all_topics)
        if execute:
            execute_reset(store, group, plan)
        else:
            live = live_members(store, group)
    if export:
        for r in plan:
            print(f"{r.topic},{r.partition},{r.new_offset}")
    elif as_json:
        for r in plan:
            print(json.dumps({"group": group, **vars(r)}))
    else:
        from klog.cli.tables import print_table

        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "LOG-END"],
                    [[group, r.topic, r.partition, _dash(r.current), r.new_offset, r.log_start, r.log_end]
                     for r in plan])
    if not execute:
        print("dry run: nothing changed (add --execute to apply)", file=sys.stderr)
    if live:
        who = ", ".join(f"{m.member_id} (pid {m.pid} on {m.host})" for m in live[:3])
        who += f" and {len(live) - 3} more" if len(live) > 3 else ""
        print(f"note: group {group} has {len(live)} live member(s): {who}; --execute will be refused until they "
              "stop", file=sys.stderr)


@app.command()
def delete(group: str, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a group and its committed offsets (refused while it has live members)."""
    from klog.client.groups_admin import delete_group

    with open_store(data_dir, create=False) as store:
        count = delete_group(store, group)
    print(json.dumps({"deleted": group, "offsets": count}) if as_json
          else f"Deleted group {group} ({count} committed offsets)")


@app.command("delete-offsets")
def delete_offsets_(
    group: str,
    topic: Annotated[list[str], typer.Option("--topic", "-t", help="TOPIC or TOPIC:P[,P...] (repeatable).")],
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a group's committed offsets for topics or partitions (refused while a live member reads them)."""
    from klog.client.groups_admin import delete_offsets

    with open_store(data_dir, create=False) as store:
        gone = [tp for scope in topic for tp in delete_offsets(store, group, scope)]
    if as_json:
        print(json.dumps({"group": group, "deleted": [list(tp) for tp in gone]}))
    else:
        print(f"Deleted {len(gone)} committed offset(s) of group {group}")


# -- `klog consume --group/--exec`: called by klog/cli/consume.py ----------------------------------------
CLI_COMMIT_INTERVAL_MS = 1000  # stdout is flushed and offsets committed at least this often while records flow


def consume_options(group: str | None, exec_cmd: str | None, batch: int | None, props: list[str] | None,
                    offset: str | None, positional: tuple) -> dict[str, str]:
    """Check the --group/--exec combination; returns the consumer properties (-X, plus -o as auto.offset.reset)."""
    if batch is not None and (exec_cmd is None or batch < 1):
        raise UsageError("--batch needs --exec and a count of 1 or more")
    if group is None:
        if props:
            raise UsageError("--property needs --group")
        return {}
    if any(x is not None for x in positional):
        raise UsageError("with --group the group decides partitions and start offsets: drop --since, --until, "
                         "--tail and --partition")
    out: dict[str, str] = {}
    if offset is not None:
        if offset not in ("beginning", "earliest", "end", "latest"):
            raise UsageError("with --group, --offset takes beginning or end (where to start without a committed "
                             "offset)")
        out["auto.offset.reset"] = "earliest" if offset in ("beginning", "earliest") else "latest"
    for pair in props or []:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise UsageError(f"invalid --property '{pair}': use name=value")
        out[name.strip()] = value.strip()
    return out


def consume_group(store, group: str | None, topics: list[str], properties: dict[str, str], line, follow: bool,
                  count: int | None, record_filter, exec_cmd: str | None, batch: int, plain=None,
                  no_color: bool = False, local_time: bool = False) -> None:
    """Read as a member of `group` (or plainly, for --exec without --group). Offsets are committed only
    for records already flushed to stdout, or whose CMD exited 0: at-least-once from the shell.
    `line` renders a record; None means the value alone on a line (a faster path without Records)."""
    from klog.client.group import GroupConfig
    from klog.meta.groups import GroupFencedError

    written: dict[tuple[str, int], int] = {}  # next offset per partition, for records out of our hands
    out = _Stdout(written)
    consumer = None

    def commit_written(tps: list | None = None) -> None:
        if out.failed:  # stdout broke: what `written` names may never have arrived (close() calls this too)
            return
        out.flush()
        offsets = {tp: written.pop(tp) for tp in list(written) if tps is None or tp in tps}
        if offsets and consumer is not None:
            try:
                consumer.commit(offsets)
            except GroupFencedError as e:  # expelled while stalled: it rejoins; the new owner redoes these
                print(f"klog: warning: {e}", file=sys.stderr)

    interval_ms = CLI_COMMIT_INTERVAL_MS
    if group is not None:
        config = GroupConfig.from_properties(properties)
        interval_ms = min(config.auto_commit_interval_ms, CLI_COMMIT_INTERVAL_MS)
        config.enable_auto_commit = False  # we commit ourselves, after the output is safe
        consumer = store.group_consumer(group, *topics, config=config, follow=follow, on_revoke=commit_written)
    watch = _TopicWatch(store, topics) if consumer is not None and follow else None
    try:
        if (consumer is not None and line is None and not exec_cmd and record_filter is None and count is None
                and not out.isatty()):
            _copy_values(consumer, out, written, follow, interval_ms, commit_written, watch)
        else:
            chunks = consumer.batches(timeout_ms=interval_ms) if consumer is not None else _chunked(plain, batch)
            if exec_cmd:
                emit = _exec_emitter(exec_cmd, batch, out, commit_written, consumer is not None)
            elif line is None and out.isatty():
                emit = _terminal_emitter(out, len(topics) > 1, no_color, local_time)
            else:
                emit = _stdout_emitter(out, line or (lambda r: (r.value or b"") + b"\n"), written, follow)
            _copy_records(consumer, chunks, emit, count, record_filter, interval_ms, commit_written, watch)
        commit_written()
    finally:
        if consumer is not None:
            consumer.close()  # on_revoke commits what was written; then it leaves the group


class _Stdout:
    """stdout for records whose offsets get committed. A short write counts as a broken pipe (the
    reader went away mid-write: BufferedWriter then returns a count instead of raising), and once a
    write or flush fails `written` is cleared and `failed` set: nothing more is committed."""

    def __init__(self, written: dict[tuple[str, int], int]) -> None:
        self.raw = sys.stdout.buffer
        self.written = written
        self.failed = False

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Around anything that writes to stdout: on an error, forget what counts as written."""
        try:
            yield
        except Exception:
            self.failed = True
            self.written.clear()
            raise

    def write(self, data: bytes) -> None:
        from klog.cli.output import WRITE_CHUNK_BYTES

        with self.guard():
            view = memoryview(data)  # bounded chunks: CPython's write can return short past 2 GiB
            for at in range(0, len(view), WRITE_CHUNK_BYTES):
                chunk = view[at:at + WRITE_CHUNK_BYTES]
                n = self.raw.write(chunk)
                if n is not None and n < len(chunk):
                    raise BrokenPipeError(errno.EPIPE, f"stdout took {n} of {len(chunk)} bytes: the reader went away")

    def flush(self) -> None:
        with self.guard():
            sys.stdout.flush()  # the text layer (a terminal's rich output) first, then the bytes
            self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()


def _chunked(records, size: int) -> Iterator[list]:  # noqa: ANN001 - an iterable of Records
    """--exec without --group: lists of `size` records (with -f a short batch waits for more)."""
    import itertools

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
            meta = self.store.topics.find(name)
            if meta is None or meta.topic_id != topic_id:
                raise UnknownTopicError(f"topic '{name}' was deleted while being followed"
                                        + (" (and created again: read it anew)" if meta is not None else ""))


def _copy_values(consumer, out: _Stdout, written: dict, follow: bool, interval_ms: int,  # noqa: ANN001
                 commit_written, watch: _TopicWatch | None = None) -> None:
    """Values only, one per line, straight from the batches (what plain `klog consume` does too); a
    partition counts as written only once its values were handed to stdout whole."""
    last_commit = time.monotonic()
    for chunks in consumer.value_batches(timeout_ms=interval_ms):
        if not chunks and watch is not None:
            watch.check()
        for tp, values, next_offset in chunks:
            if values:
                if None in values:
                    values = [v or b"" for v in values]
                values.append(b"")  # the last line's newline, without copying the joined chunk
                out.write(b"\n".join(values))
            written[tp] = next_offset
        if follow:
            out.flush()
        if time.monotonic() - last_commit >= interval_ms / 1000:
            commit_written()
            last_commit = time.monotonic()


def _copy_records(consumer, chunks, emit, count: int | None, record_filter, interval_ms: int,  # noqa: ANN001
                  commit_written, watch: _TopicWatch | None = None) -> None:
    last_commit = time.monotonic()
    emitted = 0
    for records in chunks:
        if not records and watch is not None:
            watch.check()
        epoch = consumer.rebalances if consumer is not None else 0
        for r in records:
            if consumer is not None and consumer.rebalances != epoch:
                break  # a commit rebalanced us: the rest may be someone else's now
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


def _stdout_emitter(out: _Stdout, line, written: dict, follow: bool):  # noqa: ANN001, ANN202
    """Buffer rendered records, write them per fetch; a record counts as written once its bytes were
    handed to stdout whole (its offset is committed only after commit_written flushes stdout)."""
    buf: list[bytes] = []
    marks: dict[tuple[str, int], int] = {}  # next offset per partition once `buf` is written

    def emit(r, show: bool) -> None:  # noqa: ANN001 - r None: end of a fetch
        if r is None:
            out.write(b"".join(buf))
            buf.clear()
            written.update(marks)
            marks.clear()
            if follow:
                out.flush()
            return
        if show:
            buf.append(line(r))
        marks[(r.topic, r.partition)] = r.offset + 1

    return emit


def _terminal_emitter(out: _Stdout, show_topic: bool, no_color: bool = False, local_time: bool = False):  # noqa: ANN202
    """The readable log view plain `klog consume` shows on a terminal, drawn once per fetch."""
    from klog.cli.view import TerminalView, color_wanted, local_time_wanted

    view = TerminalView(show_topic, color_wanted(no_color), local_time_wanted(local_time))
    buf: list[str] = []
    marks: dict[tuple[str, int], int] = {}

    def emit(r, show: bool) -> None:  # noqa: ANN001 - r None: end of a fetch
        if r is None:
            out.write("".join(buf).encode("utf-8", "replace"))
            buf.clear()
            out.flush()
            out.written.update(marks)
            marks.clear()
            return
        if show:
            buf.append(view.line(r))
        marks[(r.topic, r.partition)] = r.offset + 1

    return emit


def _exec_emitter(cmd: str, batch: int, out: _Stdout, commit_written, committing: bool):  # noqa: ANN001, ANN202
    """Run CMD per `batch` records (values on stdin, one per line for batches); commit after each exit 0.
    Records --grep filters out count as done once nothing before them in their partition is pending."""
    import os
    import subprocess

    from klog.errors import KlogError

    written = out.written
    pending: list = []
    pending_tps: set[tuple[str, int]] = set()
    skipped: dict[tuple[str, int], int] = {}  # filtered out behind a pending record: done when it is

    def run() -> None:
        first = pending[0]
        stdin = (first.value or b"") if batch == 1 else b"".join((r.value or b"") + b"\n" for r in pending)
        env = {**os.environ, "KLOG_TOPIC": first.topic, "KLOG_PARTITION": str(first.partition),
               "KLOG_OFFSET": str(first.offset), "KLOG_COUNT": str(len(pending))}
        out.flush()
        code = subprocess.run(cmd, shell=True, input=stdin, env=env).returncode
        if code != 0:
            commit_written()
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

    def emit(r, show: bool) -> None:  # noqa: ANN001 - r None: end of a fetch, run what is pending
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


def register(root: typer.Typer) -> None:
    """Add `klog groups ...` to the root app."""
    root.add_typer(app, name="groups")
