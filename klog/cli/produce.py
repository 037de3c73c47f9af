"""`klog produce TOPIC [FILE...]`: lines, JSON envelopes or raw input into a topic."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, current_cluster, open_store
from klog.client.ingest import check_options, parse_delimiter, parse_headers, produce_from
from klog.client.producer_settings import BATCH_SIZE_DEFAULT, producer_settings
from klog.errors import UsageError

ACKS_HELP = ("all: wait until every in-sync replica has fsynced the batch (min.insync.replicas must hold); "
             "1: until the leader has; 0: for no fsync.")


PRODUCE_HELP = (
    "Write records: one per input line by default (Kafka's default partitioner for keys).\n\n"
    "--input json reads the envelope `klog consume --json` writes (key, value, headers, timestamp, partition), "
    "so `klog consume a --json | klog produce b --input json` copies a topic losslessly. A record whose "
    "partition the topic lacks (a copy into an auto-created topic of num.partitions) goes where the partitioner "
    "puts it, with a warning; create the topic with enough partitions first to keep them. --input raw makes the "
    "whole input one record.\n\n"
    "A missing topic is created with the store's defaults (auto.create.topics.enable) and a note on stderr; "
    "on a cluster (--bootstrap-server), the cluster creates it with its own defaults if it allows."
)


def register(app: typer.Typer) -> None:
    @app.command(help=PRODUCE_HELP)
    def produce(
        topic: str,
        files: Annotated[list[str] | None, typer.Argument(help="Input files (stdin when none).")] = None,
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
        acks: Annotated[str, typer.Option("--acks", help=ACKS_HELP)] = "all",
        compression: Annotated[str, typer.Option("--compression", "-z",
                                                 help="none, gzip, snappy, lz4 or zstd.")] = "none",
        linger_ms: Annotated[int, typer.Option("--linger-ms", help="Hold a partial batch up to this long.")] = 0,
        batch_size: Annotated[int, typer.Option("--batch-size", help="Bytes per batch and partition at most.")]
        = BATCH_SIZE_DEFAULT,
        print_offsets: Annotated[bool, typer.Option("--print-offsets",
                                                    help="Print partition and offset of each record.")] = False,
        prop: Annotated[list[str] | None, typer.Option("--property", "-X", help="A producer setting name=value: "
                                                       "buffer.memory (bytes of records held before they are "
                                                       "written, over all partitions; 33554432 by default). With "
                                                       "a cluster (--bootstrap-server), any Kafka client property "
                                                       "(security.protocol, sasl.*, ssl.*, ...).")] = None,
        transactional_id: Annotated[str | None, typer.Option(
            "--transactional-id", help="Write the whole input as one transaction: read_committed readers see "
            "all of it or, if this is killed or fails, none of it.")] = None,
        transaction_records: Annotated[int | None, typer.Option(
            "--transaction-records", min=1, help="With --transactional-id: commit every N records (long streams).")]
        = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        check_options(input_format, key_separator or None, key, delimiter)
        if transaction_records is not None and transactional_id is None:
            raise UsageError("--transaction-records needs --transactional-id")
        if transactional_id is not None and current_cluster() is not None:
            raise UsageError("--transactional-id writes to the local store only (a cluster's transactions: use a "
                             "Kafka client's transactional.id)")
        settings = producer_settings(prop)
        headers = parse_headers(header)
        delim = parse_delimiter(delimiter) if delimiter is not None else None

        def on_ack(t: str, p: int, base: int, n: int) -> None:
            if print_offsets:
                sys.stdout.write("".join(f"{t}\t{p}\t{base + i}\n" for i in range(n)))

        def on_create(t: str) -> None:
            if current_cluster() is not None:  # the cluster made it, with its own settings
                print(f"klog: topic '{t}' was created by the cluster (auto.create.topics.enable) with its "
                      "defaults", file=sys.stderr)
            else:
                print(f"klog: created topic '{t}' with the store's defaults", file=sys.stderr)

        def on_warning(message: str) -> None:
            print(f"klog: warning: {message}", file=sys.stderr)

        with open_store(data_dir) as store:
            # no ack callback unless offsets are printed: on a cluster it is a Python call per record
            txn = {} if transactional_id is None else {"transactional_id": transactional_id,
                                                        "transaction_records": transaction_records}
            producer = store.producer(acks=acks, compression_type=compression, linger_ms=linger_ms,
                                      batch_size=batch_size, on_ack=on_ack if print_offsets else None,
                                      on_create=on_create, **settings, **txn)
            try:
                if txn:
                    producer.begin()
                produce_from(producer, topic, *(files or ["-"]), input_format=input_format,
                             key_separator=key_separator.encode() if key_separator else None,
                             key=key.encode() if key is not None else None, delimiter=delim, headers=headers,
                             partition=partition, on_warning=on_warning)
                if txn:
                    producer.commit()
            except BaseException:
                if txn and producer.in_transaction:
                    producer.abort()  # all or nothing: a failed or interrupted input leaves none of it
                raise
            finally:
                sys.stdout.flush()
