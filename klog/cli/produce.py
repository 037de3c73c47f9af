"""`klog produce TOPIC [FILE...]`: lines, JSON envelopes or raw input into a topic."""

from __future__ import annotations

from typing import Annotated

import typer

from klog.cli.app import DataDirOpt
from klog.client.producer_settings import BATCH_SIZE_DEFAULT

ACKS_HELP = ("all (or Kafka's -1): wait until every in-sync replica has fsynced the batch (min.insync.replicas "
             "must hold); 1: until the leader has; 0: for no fsync.")


PRODUCE_HELP = (
    "Write records: one per input line by default (Kafka's default partitioner for keys).\n\n"
    "--input json reads the envelope `klog consume --json` writes (key, value, headers, timestamp, partition), "
    "so `klog consume a --json | klog produce b --input json` copies a topic losslessly; kcat -J's lines work too "
    "(payload, ts, its flat header list). A line with neither value nor payload, or a field neither envelope has, "
    "stops it, naming the line. A record whose "
    "partition the topic lacks (a copy into an auto-created topic of num.partitions) goes where the partitioner "
    "puts it, with a warning; create the topic with enough partitions first to keep them. --input raw makes the "
    "whole input one record.\n\n"
    "A missing topic is created with the store's defaults (auto.create.topics.enable) and a note on stderr; "
    "on a cluster (--bootstrap-server), the cluster creates it with its own defaults if it allows."
)


def register(app: typer.Typer) -> None:
    @app.command(help=PRODUCE_HELP)
    def produce(
        topic: Annotated[str | None, typer.Argument(help="The topic to write to (or -t TOPIC).")] = None,
        files: Annotated[list[str] | None, typer.Argument(help="Input files (stdin when none).")] = None,
        topic_opt: Annotated[str | None, typer.Option("--topic", "-t", help="The topic, as kcat spells it (then "
                                                      "every argument is an input file).")] = None,
        key_separator: Annotated[str | None, typer.Option("--key-separator", "-K",
                                                          help="Split each line into key SEP value.")] = None,
        key: Annotated[str | None, typer.Option("--key", "-k", help="The same key for every record.")] = None,
        delimiter: Annotated[str | None, typer.Option("--delimiter", "-D", help="Records end with DELIM instead of "
                                                      "a newline (kcat's -D; escapes \\n \\t \\0 \\xNN).")]
        = None,
        header: Annotated[list[str] | None, typer.Option("--header", "-H",
                                                         help="Header k=v for every record (repeatable).")] = None,
        input_format: Annotated[str, typer.Option("--input", help="lines | json | raw")] = "lines",
        partition: Annotated[int | None, typer.Option("--partition", "-p", help="Write to this partition.")] = None,
        # (None when not given: -X's Kafka name for the same setting may set it then, not against it)
        acks: Annotated[str | None, typer.Option("--acks", help=ACKS_HELP + "  [default: all]")] = None,
        compression: Annotated[str | None, typer.Option("--compression", "-z",
                                                        help="none, gzip, snappy, lz4 or zstd.  [default: none]")]
        = None,
        linger_ms: Annotated[int | None, typer.Option("--linger-ms", help="Hold a partial batch up to this long.  "
                                                      "[default: 0]")] = None,
        batch_size: Annotated[int | None, typer.Option("--batch-size", help="Bytes per batch and partition at "
                                                       f"most.  [default: {BATCH_SIZE_DEFAULT}]")] = None,
        print_offsets: Annotated[bool, typer.Option("--print-offsets",
                                                    help="Print partition and offset of each record.")] = False,
        prop: Annotated[list[str] | None, typer.Option("--property", "-X", help="A producer setting name=value: "
                                                       "buffer.memory (bytes of records held before they are "
                                                       "written, over all partitions; 33554432 by default), and "
                                                       "Kafka's names for the flags: acks, compression.type, "
                                                       "linger.ms, batch.size. With "
                                                       "a cluster (--bootstrap-server), any Kafka client property "
                                                       "(security.protocol, sasl.*, ssl.*, ...).")] = None,
        transactional_id: Annotated[str | None, typer.Option(
            "--transactional-id", help="Write the whole input as one transaction: read_committed readers see "
            "all of it or, if this is killed or fails, none of it.")] = None,
        transaction_records: Annotated[int | None, typer.Option(
            "--transaction-records", min=1, help="With --transactional-id: commit every N records (long streams).")]
        = None,
        serdes: Annotated[list[str] | None, typer.Option(
            "--serdes", "-s", help="Encode keys and/or values in Confluent's Schema Registry framing, as "
            "confluent-kafka's serializers do: [key=|value=]avro|json|protobuf. The input is what consume -s "
            "prints (Avro's JSON encoding, JSON, Protobuf's JSON mapping), in the --schema given or the subject's "
            "latest.")] = None,
        schema: Annotated[list[str] | None, typer.Option(
            "--schema", help="With -s: [key=|value=]FILE (an Avro, JSON or .proto schema, registered under TOPIC-key / "
            "TOPIC-value as the serializers' auto.register.schemas does), id:N, or latest (the default).")] = None,
        registry: Annotated[str | None, typer.Option(
            "--registry", "-r", envvar="KLOG_SCHEMA_REGISTRY_URL",
            help="The Schema Registry -s uses (URL[,URL...]; user:password@ in it is sent as basic auth).")] = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        options = dict(locals())  # the options, by name: the hot path calls run_produce the same way
        from klog.cli.produce_run import run_produce

        run_produce(**options)
