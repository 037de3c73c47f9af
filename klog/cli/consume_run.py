"""The body of `klog consume` without Typer: klog.cli.consume declares its options, and the hot
path (klog.cli.hot) calls run_consume directly."""

from __future__ import annotations

import sys

from klog.cli.output import compile_format, json_for_terminal, write_all
from klog.cli.session import open_store, set_quiet
from klog.client.envelope import record_json_line, record_to_json
from klog.errors import CorruptLogError, UsageError

WRITE_BUFFER_RECORDS = 4096


def run_consume(*, topics, topic_opts, pattern, follow, exit_at_end, offset, since, until, tail,  # noqa: ANN001
                last, count, partition, fmt, as_json, key_delim, record_delim, skip_damaged, quiet,  # noqa: ANN001
                grep, grep_key, grep_header, group, exec_cmd, batch, prop, no_color, local_time,  # noqa: ANN001
                data_dir, txn_fields=False) -> int | None:  # noqa: ANN001
    """`klog consume` with its options as Python values (what Typer, or the hot path, parsed); 1 when
    --skip-damaged skipped something."""
    from klog.client.filters import RecordFilter
    from klog.client.timespec import parse_range

    topics = [*(topics or []), *(topic_opts or [])]
    if not topics and not pattern:
        raise UsageError("give a topic to read (or --pattern REGEX)")
    if exit_at_end and follow:
        raise UsageError("use -e (exit at the end) or -f (follow), not both")
    if quiet:
        set_quiet()
    fmt = _kcat_format(fmt, key_delim, record_delim)
    start, until_ms = parse_range(offset, since, until, tail, last, with_last=True)
    if last is not None and (last < 0 or group is not None or exec_cmd is not None):
        raise UsageError("--last needs a count of 0 or more, and no --group or --exec")
    if count is not None and count < 0:
        raise UsageError("--count needs a count of 0 or more")
    record_filter = RecordFilter.of(grep, grep_key, grep_header)
    if fmt is not None and as_json:
        raise UsageError("use --format or --json, not both")
    if txn_fields:
        _check_txn_fields(as_json, last, group, exec_cmd, count, until_ms, record_filter)
    on_terminal = sys.stdout.isatty()
    render = compile_format(fmt, escape=on_terminal) if fmt is not None else None
    if as_json and on_terminal:  # JSON escapes C0 controls itself; DEL and C1 controls too, here
        render, as_json = (lambda r: json_for_terminal(record_to_json(r)).encode() + b"\n"), False
    isolation, other_props = _isolation_level(prop or [])
    if skip_damaged and (group is not None or exec_cmd is not None):
        raise UsageError("--skip-damaged reads without --group or --exec")
    if group is not None or exec_cmd is not None:
        from klog.client.delivery import deliver

        props = _group_options(group, exec_cmd, batch, prop if group else other_props, offset,
                               (since, until, tail, partition))
        line = render or (record_json_line if as_json else None)
        with open_store(data_dir, create=False) as store:
            names = store.resolve_topics(topics or [], pattern)
            flush_each_fetch = line is None and exec_cmd is None and on_terminal  # the readable view, per fetch
            if flush_each_fetch:
                line = _terminal_line(len(names) > 1, no_color, local_time)
            plain = None if group else store.consumer(*names, partitions=partition, start=start, until_ms=until_ms,
                                                      follow=follow, count=count, record_filter=record_filter,
                                                      isolation_level=isolation)
            deliver(store, names, group=group, properties=props, line=line, follow=follow, count=count,
                    record_filter=record_filter, exec_cmd=exec_cmd, batch=batch or 1, reader=plain,
                    flush_each_fetch=flush_each_fetch)
        return
    if batch is not None or other_props:
        raise UsageError("--batch needs --exec, and --property needs --group (except isolation.level)")
    if skip_damaged and last is not None:
        raise UsageError("--skip-damaged reads forward: not with --last")
    try:
        with open_store(data_dir, create=False, read_only=True) as store:
            names = store.resolve_topics(topics or [], pattern)
            if txn_fields:
                return _write_txn_fields(store, names, start, follow, partition, isolation)
            return _read(store, names, start, until_ms, follow, count, partition, record_filter, isolation, last,
                         render, as_json, (no_color, local_time), skip_damaged)
    except CorruptLogError as e:
        raise CorruptLogError(f"{e}; {next_steps(topics or ['TOPIC'])}") from None


def next_steps(topics: list[str]) -> str:
    """What to run when a reader meets damaged data (one line, after the error)."""
    t = " ".join(topics)
    return (f"read past it with 'klog consume {t} --skip-damaged', then drop it for good with "
            f"'klog verify {t} --repair --discard-damaged'")


def _read(store, names: list[str], start, until_ms: int | None, follow: bool, count: int | None,  # noqa: ANN001
          partition, record_filter, isolation: str, last: int | None, render, as_json: bool,  # noqa: ANN001
          view_options: tuple[bool, bool], skip_damaged: bool) -> int | None:
    """consume without --group or --exec: the records to stdout; 1 when damaged ranges were skipped."""
    options = {"partitions": partition, "until_ms": until_ms, "record_filter": record_filter,
               "isolation_level": isolation}
    if last is not None:
        _write_last(store, names, options, start.value, follow, count, render, as_json, view_options)
        return None
    consumer = store.consumer(*names, start=start, follow=follow, count=count, **options)
    skipped: list[str] = []
    if skip_damaged:
        if not hasattr(consumer, "on_damage"):
            raise UsageError("--skip-damaged reads a local store, not a cluster")

        def skip(topic: str, p: int, first: int, resume: int, error: CorruptLogError) -> None:
            skipped.append(f"{topic}-{p}")
            print(f"klog: skipped {topic}-{p} offsets {first}..{resume - 1}: damaged ({error.reason}, "
                  f"{error.path})", file=sys.stderr)

        consumer.on_damage = skip
    if count == 0:
        return None
    if render is None and not as_json and sys.stdout.isatty():
        from klog.cli.view import TerminalView, color_wanted, local_time_wanted, write_stdout

        view = TerminalView(len(names) > 1, color_wanted(view_options[0]), local_time_wanted(view_options[1]))
        view.draw(consumer, write_stdout)
    else:
        _write(consumer, render, as_json)
    return 1 if skipped else None

def _check_txn_fields(as_json: bool, last, group, exec_cmd, count, until_ms, record_filter) -> None:  # noqa: ANN001
    if not as_json:
        raise UsageError("--txn-fields adds to --json: give --json too")
    if last is not None or group is not None or exec_cmd is not None or count is not None or until_ms is not None \
            or record_filter is not None:
        raise UsageError("--txn-fields reads whole batches: not with --last, --group, --exec, --count, --until or "
                         "--grep*")


def _write_txn_fields(store, names: list[str], start, follow: bool, partition, isolation: str) -> None:  # noqa: ANN001
    """consume --json --txn-fields: each batch's records with its producer fields, and the markers."""
    from klog.client.envelope import txn_json_lines

    consumer = store.consumer(*names, start=start, follow=follow, partitions=partition, isolation_level=isolation,
                              merge=False)
    if not hasattr(consumer, "batch_runs"):  # librdkafka's consumer: read_committed through a cluster
        consumer.close()
        raise UsageError("--txn-fields needs batch headers, which librdkafka's consumer does not give: through a "
                         "cluster it works with isolation.level=read_uncommitted (klog's own Fetch reader)")
    out = sys.stdout.buffer
    on_terminal = sys.stdout.isatty()  # JSON escapes C0 controls itself; DEL and C1 controls too, there
    with consumer:
        for topic, p, header, records in consumer.batch_runs(control=True):
            if records:
                lines = txn_json_lines(topic, p, header, records)
                if on_terminal:
                    lines = json_for_terminal(lines.decode()).encode()
                write_all(out, lines)
                if follow:
                    out.flush()
    out.flush()


def _kcat_format(fmt: str | None, key_delim: str | None, record_delim: str | None) -> str | None:
    """kcat's -K DELIM and -D DELIM as the --format string they stand for."""
    if key_delim is None and record_delim is None:
        return fmt
    if fmt is not None:
        raise UsageError("use --format or -K/-D, not both")
    from klog.client.ingest import parse_delimiter

    def escaped(text: str, option: str) -> str:
        try:
            raw = parse_delimiter(text)
        except UsageError:
            raise UsageError(f"invalid {option} '{text}': give a delimiter (escapes \\t \\0 \\xNN ...)") from None
        return "".join(f"\\x{b:02x}" for b in raw)

    key = f"%k{escaped(key_delim, '-K')}" if key_delim is not None else ""
    end = escaped(record_delim, "-D") if record_delim is not None else "\\n"
    return f"{key}%s{end}"


def _group_options(group: str | None, exec_cmd: str | None, batch: int | None, props: list[str] | None,
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
    from klog.client.pairs import parse_pairs

    out: dict[str, str] = {}
    if offset is not None:
        if offset not in ("beginning", "earliest", "end", "latest"):
            raise UsageError("with --group, --offset takes beginning or end (where to start without a committed "
                             "offset)")
        out["auto.offset.reset"] = "earliest" if offset in ("beginning", "earliest") else "latest"
    return {**out, **parse_pairs(props, "--property")}


def _terminal_line(show_topic: bool, no_color: bool, local_time: bool):  # noqa: ANN202
    """The readable log view's line of a record, as bytes (a group member on a terminal)."""
    from klog.cli.view import TerminalView, color_wanted, local_time_wanted

    view = TerminalView(show_topic, color_wanted(no_color), local_time_wanted(local_time))
    return lambda r: view.line(r).encode("utf-8", "replace")


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


def _write_last(store, names: list[str], options: dict, n: int, follow: bool, count: int | None, render,  # noqa: ANN001
                as_json: bool, view_options: tuple[bool, bool]) -> None:
    """--last N: the library's newest records, then with -f whatever comes after them."""
    from klog.client.newest import newest_records

    newest, rest = newest_records(store, names, n, count=count, follow=follow, **options)
    if render is None and not as_json and sys.stdout.isatty():
        from klog.cli.view import TerminalView, color_wanted, local_time_wanted, write_stdout

        view = TerminalView(len(names) > 1, color_wanted(view_options[0]), local_time_wanted(view_options[1]))
        view.draw(newest, write_stdout)
        if rest is not None:
            view.draw(rest, write_stdout)
        return
    if as_json:
        line = record_json_line
    else:
        line = render or (lambda r: (r.value or b"") + b"\n")
    write_all(sys.stdout.buffer, b"".join(line(r) for r in newest))
    sys.stdout.buffer.flush()
    if rest is not None:
        _write(rest, render, as_json)


def _write(consumer, render, as_json: bool) -> None:
    """Stream records to a pipe or file; flush whenever the consumer would wait so -f output is immediate."""
    out = sys.stdout.buffer
    if (render is None and not as_json and (len(consumer.cursors) == 1 or consumer.merges_value_chunks)
            and consumer.takes_everything):
        for values in consumer.value_chunks(null=b""):
            if values:
                values.append(b"")  # the last line's newline, without copying the joined chunk
                write_all(out, b"\n".join(values))
                if consumer.follow:
                    out.flush()
        out.flush()
        return
    if (as_json and render is None and not (consumer.merge and len(consumer.cursors) > 1)
            and consumer.gives_record_runs and consumer.takes_everything):
        from klog.client.envelope import json_lines

        for topic, partition, ts_type, records in consumer.record_runs():
            if records:
                write_all(out, json_lines(topic, partition, ts_type, records))
                if consumer.follow:
                    out.flush()
        out.flush()
        return
    if as_json:
        line = record_json_line
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
            write_all(out, b"".join(buf))
            buf.clear()
            if follow:
                out.flush()
    write_all(out, b"".join(buf))
    out.flush()
