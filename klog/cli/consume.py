"""`klog consume TOPIC...`: like cat (read to the end, exit) or tail -f (-f)."""

from __future__ import annotations

from typing import Annotated

import typer

from klog.cli.app import DataDirOpt
from klog.cli.output import FORMAT_HELP
from klog.cli.ranges import CountOpt, OffsetOpt, PartitionOpt, SinceOpt, TailOpt, UntilOpt

SERDES_OPTION_HELP = ("Decode keys and/or values for printing, as kcat's -s: [key=|value=]FORMAT, FORMAT avro, "
                      "json or protobuf (Confluent's Schema Registry framing, schemas from -r) or a kcat "
                      "pack-format of < > b B h H i I q Q c s $ and spaces ('>q', '>i s'). Avro prints as Avro's "
                      "JSON encoding, Protobuf as its JSON mapping; --json embeds it with key_schema_id / "
                      "value_schema_id.")
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
        topic_opts: Annotated[list[str] | None, typer.Option("--topic", "-t", help="A topic to read, as kcat "
                                                             "spells it (the same as the TOPIC argument).")] = None,
        pattern: Annotated[str | None, typer.Option("--pattern", help="Also read topics whose whole name matches "
                                                    "REGEX ('orders.*', not 'orders').")] = None,
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Wait for new records (like tail -f).")] = False,
        exit_at_end: Annotated[bool, typer.Option("--exit", "-e", help="Exit at the end of the topics (kcat's -e; "
                                                  "what klog does without -f).")] = False,
        offset: OffsetOpt = None,
        from_beginning: Annotated[bool, typer.Option("--from-beginning", help="kafka-console-consumer's spelling: "
                                                     "klog starts at the beginning anyway; with --group, where a "
                                                     "group without committed offsets starts.")] = False,
        since: SinceOpt = None,
        until: UntilOpt = None,
        tail: TailOpt = None,
        last: Annotated[int | None, typer.Option("--last", help="The N newest records of the topics (all partitions), "
                                                 "in time order (with --grep*: the N newest matches); with -f, "
                                                 "then follow.")] = None,
        count: CountOpt = None,
        partition: PartitionOpt = None,
        fmt: Annotated[str | None, typer.Option(
            "--format", "-F", help="kcat-style format string (see above); json is --json (rpk's named format).")]
        = None,
        as_json: Annotated[bool, typer.Option("--json", "-J", help="JSON lines: the envelope produce --input json "
                                              "reads.")] = False,
        txn_fields: Annotated[bool, typer.Option("--txn-fields", help="With --json: each record's producer_id, "
                                                 "producer_epoch, transactional and control (its batch's, as klog "
                                                 "dump names them), and the COMMIT/ABORT markers as lines of their "
                                                 "own (end_txn_marker, coordinator_epoch); partitions one after "
                                                 "another.")] = False,
        key_delim: Annotated[str | None, typer.Option("-K", help="Print each record as key DELIM value (kcat's -K; "
                                                      "escapes \\t \\0 \\xNN ...).")] = None,
        record_delim: Annotated[str | None, typer.Option("-D", help="End each record with DELIM instead of a newline "
                                                         "(kcat's -D: -D '\\0' reads back produce -D '\\0').")]
        = None,
        skip_damaged: Annotated[bool, typer.Option("--skip-damaged", help="Read past damaged data: print every "
                                                   "readable record, name each skipped range on stderr, exit 1.")]
        = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warnings on stderr (errors still print).")]
        = False,
        grep: Annotated[str | None, typer.Option("--grep", "-g", help="Only records whose value matches REGEX.")]
        = None,
        grep_key: Annotated[str | None, typer.Option("--grep-key", help="Only records whose key matches REGEX.")]
        = None,
        grep_header: Annotated[str | None, typer.Option("--grep-header", help="Only records with a header whose "
                                                        "name=value matches REGEX.")] = None,
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
        serdes: Annotated[list[str] | None, typer.Option("--serdes", "-s", help=SERDES_OPTION_HELP)] = None,
        registry: Annotated[str | None, typer.Option("--registry", "-r", envvar="KLOG_SCHEMA_REGISTRY_URL",
                                                     help="The Schema Registry -s avro/json reads schemas from "
                                                     "(URL[,URL...]; user:password@ in it is sent as basic "
                                                     "auth).")] = None,
        no_color: Annotated[bool, typer.Option("--no-color", help="Terminal view without colours or bold "
                                               "(also when NO_COLOR is set).")] = False,
        local_time: Annotated[bool, typer.Option("--local-time", help="Terminal view times in the local time zone "
                                                 "(also when TZ is set); UTC otherwise.")] = False,
        data_dir: DataDirOpt = None,
    ) -> None:
        options = dict(locals())  # the options, by name: the hot path calls run_consume the same way
        from klog.cli.consume_run import run_consume

        return run_consume(**options)
