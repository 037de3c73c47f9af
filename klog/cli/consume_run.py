"""The body of `klog consume` without Typer: klog.cli.consume declares its options, and the hot
path (klog.cli.hot) calls run_consume directly."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from klog.cli.env import Env, current_env
from klog.cli.output import OutputFormat, RecordOutput, named_format, record_output, terminal_view
from klog.cli.session import open_store, set_quiet
from klog.client.record_writer import write_newest, write_records
from klog.errors import CorruptLogError, UsageError

if TYPE_CHECKING:
    from klog.cli.view import TerminalView
    from klog.client.deserializers import RecordDecoder
    from klog.client.record_writer import Line


INT64_MAX = 2**63 - 1


def run_consume(*, topics, topic_opts, pattern, follow, exit_at_end, offset, since, until, tail,  # noqa: ANN001
                last, count, partition, fmt, as_json, key_delim, record_delim, skip_damaged, quiet,  # noqa: ANN001
                grep, grep_key, grep_header, group, exec_cmd, batch, prop, no_color, local_time,  # noqa: ANN001
                data_dir, txn_fields=False, serdes=None, registry=None, from_beginning=False) -> int | None:  # noqa: ANN001
    """`klog consume` with its options as Python values (what Typer, or the hot path, parsed); 1 when
    --skip-damaged skipped something."""
    from klog.client.filters import RecordFilter
    from klog.client.timespec import parse_range

    topics = [*(topics or []), *(topic_opts or [])]
    if not topics and not pattern:
        raise UsageError("give a topic to read (or --pattern REGEX)")
    if exit_at_end and follow:
        raise UsageError("use -e (exit at the end) or -f (follow), not both")
    _habits(topics, prop or [])
    if from_beginning:
        offset = _from_beginning(offset, since, tail, last, group)
    if quiet:
        set_quiet()
    fmt, as_json = named_format(_kcat_format(fmt, key_delim, record_delim), as_json)  # -F json -K: : -F's error
    if last is not None and last > INT64_MAX:  # more than a log can hold is all of it (a C-sized bound takes no more)
        last = INT64_MAX
    start, until_ms = parse_range(offset, since, until, tail, last, with_last=True)
    if last is not None and (last < 0 or group is not None or exec_cmd is not None):
        raise UsageError("--last needs a count of 0 or more, and no --group or --exec")
    if count is not None and count < 0:
        raise UsageError("--count needs a count of 0 or more")
    record_filter = RecordFilter.of(grep, grep_key, grep_header)
    env = current_env()
    output = record_output(env, fmt, as_json)  # the one choice: view, JSON, --format or raw values
    if txn_fields:
        _check_txn_fields(as_json, last, group, exec_cmd, count, until_ms, record_filter)
    decoder = _decoder(serdes, registry, txn_fields)
    isolation, other_props = _isolation_level(prop or [])
    if skip_damaged and (group is not None or exec_cmd is not None):
        raise UsageError("--skip-damaged reads without --group or --exec")
    if group is not None or exec_cmd is not None:
        from klog.client.delivery import deliver

        props = _group_options(group, exec_cmd, batch, prop if group else other_props, offset,
                               (since, until, tail, partition))
        # the readable view flushed per fetch; a command (--exec) gets values, not the view
        flush_each_fetch = output.format is OutputFormat.VIEW and exec_cmd is None
        line = None if output.format in (OutputFormat.VIEW, OutputFormat.RAW) else output.render()
        if decoder is not None and output.format is OutputFormat.JSON:
            line = _decoded_json(decoder, env.stdout_tty)
        with open_store(data_dir, create=False) as store:
            names = store.resolve_topics(topics or [], pattern)
            if flush_each_fetch:
                line = _view_line(terminal_view(env, len(names) > 1, no_color, local_time))
            # (without a group the reader decodes, --grep then matching decoded text; a group decodes in deliver)
            plain = None if group else store.consumer(*names, partitions=partition, start=start, until_ms=until_ms,
                                                      follow=follow, count=count, record_filter=record_filter,
                                                      isolation_level=isolation)
            deliver(store, names, group=group, properties=props, line=line, follow=follow, count=count,
                    record_filter=record_filter, exec_cmd=exec_cmd, batch=batch or 1, reader=plain,
                    flush_each_fetch=flush_each_fetch, decode=decoder.decode if decoder is not None else None)
        return
    if batch is not None:
        raise UsageError("--batch needs --exec")
    if other_props:
        raise UsageError("--property needs --group (except isolation.level)")
    if skip_damaged and last is not None:
        raise UsageError("--skip-damaged reads forward: not with --last")
    try:
        with open_store(data_dir, create=False, read_only=True) as store:
            names = store.resolve_topics(topics or [], pattern)
            if txn_fields:
                return _write_txn_fields(store, names, start, follow, partition, isolation, env.stdout_tty)
            return _read(store, names, start, until_ms, follow, count, partition, record_filter, isolation, last,
                         (env, output, no_color, local_time), skip_damaged, decoder)
    except CorruptLogError as e:
        raise CorruptLogError(f"{e}; {next_steps(topics or ['TOPIC'])}") from None


# kafka-console-consumer's --property names (its formatter's), and klog's spelling of them
CONSOLE_CONSUMER = ("print.key", "print.value", "print.timestamp", "print.partition", "print.offset",
                     "print.headers", "key.separator", "line.separator", "headers.separator", "null.literal",
                     "key.deserializer", "value.deserializer")


def _habits(topics: list[str], props: list[str]) -> None:
    """Other tools' spellings that would fail as something else: the error names klog's."""
    for t in topics:
        if any(c in t for c in "%\\") or any(c.isspace() for c in t):  # consume T -f '%k %s\n' (kcat's -f FMT)
            raise UsageError(f"'{t}' is not a topic name: kcat's -f FMT is klog's -F FMT (--format; klog's -f is "
                             "follow)")
    for pair in props:
        name = pair.partition("=")[0].strip()
        if name in CONSOLE_CONSUMER:
            raise UsageError(f"--property {name} is kafka-console-consumer's formatter: klog prints with --format "
                             "(-F '%k\\t%s\\n': %k key, %s value, %T timestamp, %p partition, %o offset, %h "
                             "headers), -K SEP or --json")


def _from_beginning(offset: str | None, since: str | None, tail: int | None, last: int | None,
                    group: str | None) -> str | None:
    """kafka-console-consumer's --from-beginning: where klog starts anyway; with --group, where a group
    without committed offsets starts (auto.offset.reset=earliest), as Kafka's."""
    from klog.client.consumer import StartKind, StartSpec

    if offset is not None and StartSpec.parse(offset).kind is not StartKind.BEGINNING:
        raise UsageError(f"--from-beginning and -o {offset} disagree: give one")
    if since is not None or tail is not None or last is not None:
        raise UsageError("--from-beginning starts at the beginning: not with --since, --tail or --last")
    return "beginning" if group is not None else offset


def next_steps(topics: list[str]) -> str:
    """What to run when a reader meets damaged data (one line, after the error)."""
    t = " ".join(topics)
    return (f"read past it with 'klog consume {t} --skip-damaged', then drop it for good with "
            f"'klog verify {t} --repair --discard-damaged'")


def _read(store, names: list[str], start, until_ms: int | None, follow: bool, count: int | None,  # noqa: ANN001
          partition, record_filter, isolation: str, last: int | None,  # noqa: ANN001
          shown: tuple[Env, RecordOutput, bool, bool], skip_damaged: bool,
          decoder: RecordDecoder | None = None) -> int | None:
    """consume without --group or --exec: the records to stdout; 1 when damaged ranges were skipped."""
    if decoder is not None:
        record_filter = decoder.filtering(record_filter)
        shown = (shown[0], _decoding_output(shown[1], decoder, shown[0].stdout_tty), *shown[2:])
    options = {"partitions": partition, "until_ms": until_ms, "record_filter": record_filter,
               "isolation_level": isolation}
    if last is not None:
        _write_last(store, names, options, start.value, follow, count, shown, decoder)
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
    env, output, no_color, local_time = shown
    if output.format is OutputFormat.VIEW:
        from klog.cli.view import write_stdout

        _decoding_view(terminal_view(env, len(names) > 1, no_color, local_time), decoder).draw(consumer, write_stdout)
    else:
        write_records(consumer, sys.stdout.buffer, output.line, output.as_json)
    return 1 if skipped else None

def _check_txn_fields(as_json: bool, last, group, exec_cmd, count, until_ms, record_filter) -> None:  # noqa: ANN001
    if not as_json:
        raise UsageError("--txn-fields adds to --json: give --json too")
    if last is not None or group is not None or exec_cmd is not None or count is not None or until_ms is not None \
            or record_filter is not None:
        raise UsageError("--txn-fields reads whole batches: not with --last, --group, --exec, --count, --until or "
                         "--grep*")


def _write_txn_fields(store, names: list[str], start, follow: bool, partition, isolation: str,  # noqa: ANN001
                      on_terminal: bool) -> None:
    """consume --json --txn-fields: each batch's records with its producer fields, and the markers."""
    from klog.cli.output import json_for_terminal
    from klog.client.envelope import txn_json_lines
    from klog.client.record_writer import write_all

    consumer = store.consumer(*names, start=start, follow=follow, partitions=partition, isolation_level=isolation,
                              merge=False)
    if not hasattr(consumer, "batch_runs"):  # librdkafka's consumer: read_committed through a cluster
        consumer.close()
        raise UsageError("--txn-fields needs batch headers, which librdkafka's consumer does not give: through a "
                         "cluster it works with isolation.level=read_uncommitted (klog's own Fetch reader)")
    out = sys.stdout.buffer
    with consumer:
        for topic, p, header, records in consumer.batch_runs(control=True):
            if records:
                lines = txn_json_lines(topic, p, header, records)
                if on_terminal:  # JSON escapes C0 controls itself; DEL and C1 controls too, there
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
    from klog.cli.argv import delimiter_option

    def escaped(text: str, option: str) -> str:
        return "".join(f"\\x{b:02x}" for b in delimiter_option(text, option))

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
        from klog.client.consumer import StartKind, StartSpec

        kind = StartSpec.parse(offset).kind if offset.strip()[:2] not in ("s@", "e@") else None
        if kind not in (StartKind.BEGINNING, StartKind.END):
            raise UsageError("with --group, --offset takes beginning or end (where to start without a committed "
                             "offset)")
        out["auto.offset.reset"] = "earliest" if kind is StartKind.BEGINNING else "latest"
    return {**out, **parse_pairs(props, "--property")}


def _view_line(view: TerminalView) -> Line:
    """The readable log view's line of a record, as bytes (a group member on a terminal)."""
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


def _write_last(store, names: list[str], options: dict, n: int, follow: bool, count: int | None,  # noqa: ANN001
                shown: tuple[Env, RecordOutput, bool, bool], decoder: RecordDecoder | None = None) -> None:
    """--last N: the library's newest records, then with -f whatever comes after them."""
    from klog.client.newest import newest_records

    newest, rest = newest_records(store, names, n, count=count, follow=follow, **options)
    env, output, no_color, local_time = shown
    if output.format is OutputFormat.VIEW:
        from klog.cli.view import write_stdout

        view = _decoding_view(terminal_view(env, len(names) > 1, no_color, local_time), decoder)
        view.draw(newest, write_stdout)
        if rest is not None:
            view.draw(rest, write_stdout)
        return
    write_newest(newest, rest, sys.stdout.buffer, output.line, output.as_json)


def _decoder(serdes: list[str] | None, registry: str | None, txn_fields: bool) -> RecordDecoder | None:
    """-s/-r as a RecordDecoder; None without -s."""
    if not serdes:
        if registry is not None and registry.strip():
            raise UsageError("-r names the Schema Registry for -s avro/json: give -s too")
        return None
    if txn_fields:
        raise UsageError("--txn-fields prints records as stored: not with -s")
    from klog.client.deserializers import RecordDecoder, parse_serdes

    return RecordDecoder(parse_serdes(serdes), registry)


def _decoding_output(output: RecordOutput, decoder: RecordDecoder, on_terminal: bool) -> RecordOutput:
    """The output rendering decoded records (the terminal view's lines: _decoding_view)."""
    if output.format is OutputFormat.VIEW:
        return output
    if output.format is OutputFormat.JSON:
        return RecordOutput(output.format, _decoded_json(decoder, on_terminal))
    return RecordOutput(output.format, decoder.line(output.render()))


def _decoded_json(decoder: RecordDecoder, on_terminal: bool) -> Line:
    """--json of decoded records; on a terminal with DEL and C1 controls escaped, as record_output's."""
    if not on_terminal:
        return decoder.json_line
    from klog.cli.output import json_for_terminal

    return lambda r: json_for_terminal(decoder.json_line(r).decode()).encode()


def _decoding_view(view: TerminalView, decoder: RecordDecoder | None) -> TerminalView:
    if decoder is not None:
        view.line = decoder.line(view.line)  # type: ignore[method-assign]
    return view
