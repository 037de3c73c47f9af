"""`klog consume TOPIC...`: like cat (read to the end, exit) or tail -f (-f)."""

from __future__ import annotations

import re
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, open_store
from klog.cli.output import FORMAT_HELP, compile_format, record_to_json
from klog.errors import UsageError

WRITE_BUFFER_RECORDS = 4096

CONSUME_HELP = (
    "Read records: from the start to the current end, then exit (-f: keep following).\n\n"
    "Records of several partitions are merged in timestamp order; each partition keeps its order. On a pipe "
    "each value is printed alone on a line, as stored; on a terminal, a readable log view (control characters "
    "escaped).\n\n"
    f"{FORMAT_HELP}"
)


def register(app: typer.Typer) -> None:
    @app.command(help=CONSUME_HELP)
    def consume(
        topics: Annotated[list[str] | None, typer.Argument(help="Topics to read.")] = None,
        pattern: Annotated[str | None, typer.Option("--pattern", help="Also read topics matching REGEX.")] = None,
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Wait for new records (like tail -f).")] = False,
        offset: Annotated[str | None, typer.Option("--offset", "-o",
                                                   help="beginning | end | N | -N (N back from the end).")] = None,
        since: Annotated[str | None, typer.Option("--since", help="Start at a time: ISO, epoch ms, 15m ago.")] = None,
        until: Annotated[str | None, typer.Option("--until", help="Stop before this time.")] = None,
        tail: Annotated[int | None, typer.Option("--tail", help="Last N records of each partition.")] = None,
        count: Annotated[int | None, typer.Option("--count", "-n", help="Stop after N records in all.")] = None,
        partition: Annotated[list[int] | None, typer.Option("--partition", "-p", help="Only this partition.")] = None,
        fmt: Annotated[str | None, typer.Option("--format", "-F", help="kcat-style format string (see above).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="JSON lines: the envelope produce --input json reads.")]
        = False,
        grep: Annotated[str | None, typer.Option("--grep", "-g", help="Only records whose value matches REGEX.")]
        = None,
        group: Annotated[str | None, typer.Option("--group", "-G", help="Join consumer group G: split the partitions "
                                                  "with its other members; resume at its committed offsets.")] = None,
        exec_cmd: Annotated[str | None, typer.Option("--exec", help="Run CMD (sh -c) per record, value on stdin, "
                                                     "KLOG_TOPIC/PARTITION/OFFSET set; with --group, commit only "
                                                     "after it exits 0.")] = None,
        batch: Annotated[int | None, typer.Option("--batch", help="With --exec: up to N records per run, one value "
                                                  "per line.")] = None,
        prop: Annotated[list[str] | None, typer.Option("--property", "-X", help="A consumer setting name=value: "
                                                       "isolation.level (read_uncommitted, the default as in Kafka's "
                                                       "clients, or read_committed: skip aborted transactions, stop "
                                                       "at the last stable offset); with --group also "
                                                       "partition.assignment.strategy, session.timeout.ms, "
                                                       "heartbeat.interval.ms, max.poll.interval.ms, "
                                                       "auto.offset.reset, auto.commit.interval.ms, client.id. "
                                                       "With a cluster (--bootstrap-server), any Kafka client "
                                                       "property (security.protocol, sasl.*, ssl.*, ...).")]
        = None,
        no_color: Annotated[bool, typer.Option("--no-color", help="Terminal view without colours or bold "
                                               "(also when NO_COLOR is set).")] = False,
        local_time: Annotated[bool, typer.Option("--local-time", help="Terminal view times in the local time zone "
                                                 "(also when TZ is set); UTC otherwise.")] = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        from klog.client.consumer import StartSpec
        from klog.client.timespec import parse_time_ms

        if not topics and not pattern:
            raise UsageError("give a topic to read (or --pattern REGEX)")
        chosen = [x for x in (offset, since, tail) if x is not None]
        if len(chosen) > 1:
            raise UsageError("use only one of --offset, --since and --tail")
        if since is not None:
            start = StartSpec("timestamp", parse_time_ms(since))
        elif tail is not None:
            if tail < 0:
                raise UsageError("--tail needs a count of 0 or more")
            start = StartSpec("tail", tail)
        else:
            start = StartSpec.parse(offset or "beginning")
        until_ms = parse_time_ms(until) if until else None
        if count is not None and count < 0:
            raise UsageError("--count needs a count of 0 or more")
        record_filter = None
        if grep:
            try:
                rx = re.compile(grep.encode())
            except re.error as e:
                raise UsageError(f"invalid --grep '{grep}': {e}") from None
            record_filter = lambda r: r.value is not None and rx.search(r.value) is not None  # noqa: E731
        if fmt is not None and as_json:
            raise UsageError("use --format or --json, not both")
        render = compile_format(fmt) if fmt is not None else None
        isolation, other_props = _isolation_level(prop or [])
        if group is not None or exec_cmd is not None:
            from klog.cli.groups import consume_group, consume_options

            props = consume_options(group, exec_cmd, batch, prop if group else other_props, offset,
                                    (since, until, tail, partition))
            with open_store(data_dir, create=False) as store:
                names = store.resolve_topics(topics or [], pattern)
                line = render or ((lambda r: record_to_json(r).encode() + b"\n") if as_json else None)
                plain = None if group else store.consumer(*names, partitions=partition, start=start, until_ms=until_ms,
                                                          follow=follow, count=count, record_filter=record_filter,
                                                          isolation_level=isolation)
                consume_group(store, group, names, props, line, follow, count, record_filter, exec_cmd, batch or 1,
                              plain, no_color, local_time)
            return
        if batch is not None or other_props:
            raise UsageError("--batch needs --exec, and --property needs --group (except isolation.level)")
        with open_store(data_dir, create=False) as store:
            names = store.resolve_topics(topics or [], pattern)
            consumer = store.consumer(*names, partitions=partition, start=start, until_ms=until_ms, follow=follow,
                                      count=count, record_filter=record_filter, isolation_level=isolation)
            if count == 0:
                return
            if render is None and not as_json and sys.stdout.isatty():
                from klog.cli.view import TerminalView, color_wanted, local_time_wanted, write_stdout

                view = TerminalView(len(names) > 1, color_wanted(no_color), local_time_wanted(local_time))
                view.draw(consumer, write_stdout)
                return
            _write(consumer, render, as_json)


def _isolation_level(props: list[str]) -> tuple[str, list[str]]:
    """isolation.level from -X (Kafka's clients default to read_uncommitted), and the other -X pairs."""
    from klog.store.txn import ISOLATION_LEVELS, READ_UNCOMMITTED

    level, rest = READ_UNCOMMITTED, []
    for pair in props:
        name, _, value = pair.partition("=")
        if name.strip() != "isolation.level":
            rest.append(pair)
        elif value.strip() in ISOLATION_LEVELS:
            level = value.strip()
        else:
            raise UsageError(f"isolation.level must be {' or '.join(ISOLATION_LEVELS)}, not '{value.strip()}'")
    return level, rest


def _write(consumer, render, as_json: bool) -> None:
    """Stream records to a pipe or file; flush whenever the consumer would wait so -f output is immediate."""
    out = sys.stdout.buffer
    if (render is None and not as_json and len(consumer.cursors) == 1 and consumer.record_filter is None
            and consumer.until_ms is None and consumer.count is None):
        for values in consumer.value_chunks():
            if values:
                out.write(b"\n".join(v or b"" for v in values) + b"\n")
                if consumer.follow:
                    out.flush()
        out.flush()
        return
    if as_json:
        def line(r) -> bytes:
            return record_to_json(r).encode() + b"\n"
    elif render is not None:
        line = render
    else:
        def line(r) -> bytes:
            return (r.value or b"") + b"\n"
    buf: list[bytes] = []
    follow = consumer.follow
    for r in consumer:
        buf.append(line(r))
        if follow or len(buf) >= WRITE_BUFFER_RECORDS:
            out.write(b"".join(buf))
            buf.clear()
            if follow:
                out.flush()
    out.write(b"".join(buf))
    out.flush()
