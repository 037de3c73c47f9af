"""The body of `klog produce` without Typer: klog.cli.produce declares its options, and the hot
path (klog.cli.hot) calls run_produce directly."""

from __future__ import annotations

import sys

from klog.cli.argv import delimiter_option
from klog.cli.session import current_cluster, open_store
from klog.client.ingest import check_options, parse_delimiter, parse_headers, produce_from
from klog.client.producer_settings import FLAG_DEFAULTS, SETTINGS, acks_setting, producer_settings
from klog.errors import KlogError, UsageError


def run_produce(*, topic, files, topic_opt, key_separator, key, delimiter, header, input_format,  # noqa: ANN001
                partition, acks, compression, linger_ms, batch_size, print_offsets, prop,  # noqa: ANN001
                transactional_id, transaction_records, data_dir, serdes=None, schema=None,  # noqa: ANN001
                registry=None) -> None:  # noqa: ANN001
    """`klog produce` with its options as Python values (what Typer, or the hot path, parsed)."""
    topic, files = _topic(topic, files, topic_opt)
    check_options(input_format, key_separator or None, key, delimiter)
    if transaction_records is not None and transactional_id is None:
        raise UsageError("--transaction-records needs --transactional-id")
    if transaction_records is not None and transaction_records < 1:
        raise UsageError(f"--transaction-records must be at least 1, not {transaction_records}")
    if linger_ms is not None and linger_ms < 0:  # Kafka's linger.ms is at least 0; -1 was taken as 0 without a word
        raise UsageError(f"--linger-ms must be 0 or more, not {linger_ms}")
    encodings = _encodings(serdes, schema, registry)
    settings = _settings(prop, {"acks": None if acks is None else acks_setting(acks), "compression_type": compression,
                                "linger_ms": linger_ms, "batch_size": batch_size}, {"acks": acks})
    key_sep = delimiter_option(key_separator, "-K") if key_separator else None
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

    encoder = None
    if encodings is not None:  # (the registry asked before the store is opened: a bad schema writes nothing)
        from klog.client.serializers import RecordEncoder

        encoder = RecordEncoder(encodings[0], registry, topic, encodings[1])
    with open_store(data_dir) as store:
        # no ack callback unless offsets are printed: on a cluster it is a Python call per record
        txn = {} if transactional_id is None else {"transactional_id": transactional_id,
                                                    "transaction_records": transaction_records}
        producer = store.producer(on_ack=on_ack if print_offsets else None, on_create=on_create, **settings, **txn)
        try:
            if txn:
                producer.begin()
            produce_from(producer, topic, *(files or ["-"]), input_format=input_format,
                         key_separator=key_sep,
                         key=key.encode() if key is not None else None, delimiter=delim, headers=headers,
                         partition=partition, on_warning=on_warning, encoder=encoder)
            if txn:
                producer.commit()
        except BaseException as e:
            if txn and producer.in_transaction:
                aborted = getattr(producer, "_sent_in_transaction", 0)  # (TransactionFlow's count)
                producer.abort()  # all or nothing: a failed or interrupted input leaves none of it
                if isinstance(e, KlogError) and str(e).endswith("records before it were written"):
                    e.args = (f"{e}, {aborted} of them in the transaction now aborted: read_committed readers see "
                              f"{producer.records_sent - aborted}",)
            raise
        finally:
            sys.stdout.flush()


def _topic(topic: str | None, files: list[str] | None, topic_opt: str | None) -> tuple[str, list[str] | None]:
    """The topic argument, or kcat's -t T (then every argument is an input file, as kcat's are)."""
    if topic_opt is None:
        if topic is None:
            raise UsageError("give a topic to write to (klog produce TOPIC, or -t TOPIC)")
        return topic, files
    return topic_opt, [*([topic] if topic is not None else []), *(files or [])] or None


def _settings(props: list[str] | None, flags: dict[str, object], shown: dict[str, object]) -> dict[str, object]:
    """The producer's keywords: the flags given (None: not given), and -X's Kafka names for the same
    settings, over FLAG_DEFAULTS (a flag and -X saying otherwise is a UsageError, even when the flag
    says the default: --acks all -X acks=0 is not acks=0); `shown`: a flag's text as given, for that error."""
    settings = producer_settings(props)
    flag_names = {v: k for k, v in SETTINGS.items()}
    given = {keyword: value for keyword, value in flags.items() if value is not None}
    for keyword, value in given.items():
        if keyword in settings and settings[keyword] != value:
            raise UsageError(f"{FLAG_NAMES[keyword]} {shown.get(keyword, value)} and -X {flag_names[keyword]}="
                             f"{settings[keyword]} disagree: give one")
    return {**FLAG_DEFAULTS, **given, **settings}


FLAG_NAMES = {"acks": "--acks", "compression_type": "-z", "linger_ms": "--linger-ms", "batch_size": "--batch-size"}


def _encodings(serdes: list[str] | None, schema: list[str] | None,
               registry: str | None) -> tuple[dict[str, str], dict[str, str]] | None:
    """-s, --schema and -r checked: ({field: format}, {field: schema}); None without -s."""
    if not serdes:
        if schema:
            raise UsageError("--schema says which schema -s encodes with: give -s too")
        if registry is not None and registry.strip():
            raise UsageError("-r names the Schema Registry for -s avro/json: give -s too")
        return None
    from klog.client.serializers import parse_encodings, parse_schema_options

    encodings = parse_encodings(serdes)
    return encodings, parse_schema_options(schema or [], encodings)
