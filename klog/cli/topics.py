"""`klog topics create|list|describe|alter|delete`."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store
from klog.cli.env import current_env

app = typer.Typer(help="Create, list, describe, alter and delete topics.", no_args_is_help=True)


def parse_configs(pairs: list[str] | None) -> dict[str, str]:
    from klog.client.pairs import parse_pairs

    return parse_pairs(pairs, "--config")


IoRateOpt = Annotated[float | None, typer.Option(
    "--io-max-bytes-per-second", metavar="BYTES",
    help="Pace compaction's reads and writes to this many bytes per second (log.cleaner.io.max.bytes.per.second); "
         "default: as fast as the disk goes.")]
ConfigOpt = Annotated[list[str] | None, typer.Option("--config", "-c", help="Topic config name=value (repeatable).")]


@app.command()
def create(
    topic: str,
    partitions: Annotated[int | None, typer.Option("--partitions", "-p", help="Number of partitions.")] = None,
    replication_factor: Annotated[int | None, typer.Option("--replication-factor", "-r",
                                                           help="Replicas per partition.")] = None,
    config: ConfigOpt = None,
    if_not_exists: Annotated[bool, typer.Option("--if-not-exists", help="Succeed if it exists.")] = False,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a topic."""
    configs = parse_configs(config)
    with open_store(data_dir) as store:
        existed = if_not_exists and store.has_topic(topic)
        meta = store.create_topic(topic, partitions, replication_factor, configs, exist_ok=if_not_exists)
    if as_json:
        print(json.dumps({"topic": meta.name, "partitions": len(meta.partitions),
                          "replication_factor": meta.replication_factor, "configs": meta.configs,
                          "created": not existed}))
        return
    n = len(meta.partitions)
    shape = f"{n} partition{'' if n == 1 else 's'}, replication factor {meta.replication_factor}"
    if not existed:
        print(f"klog: created topic '{meta.name}' ({shape})", file=sys.stderr)  # produce's note, the same words
        return
    print(f"klog: topic '{meta.name}' already exists ({shape}); left unchanged", file=sys.stderr)
    differs = []
    if partitions is not None and partitions != n:
        differs.append(f"{partitions} partitions")
    if replication_factor is not None and replication_factor != meta.replication_factor:
        differs.append(f"replication factor {replication_factor}")
    differs += [f"{k}={v}" for k, v in configs.items() if meta.configs.get(k) != v]
    if differs:
        from klog.cli.app import warn

        warn(f"topic {meta.name} differs from the request ({', '.join(differs)}): use 'klog topics alter' "
             "to change it")


@app.command("list")
def list_(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """List topics with partitions, offsets and size. OFFSETS: the offsets between each partition's
    log start and high watermark, summed (what rpk shows as LOG-START-OFFSET and HIGH-WATERMARK);
    the records a consumer gets from the beginning are at most that many: transaction markers,
    compaction and discarded damage leave offsets that hold no record. (Counting records would read
    every batch.)"""
    with open_store(data_dir, create=False, read_only=True) as store:
        infos = [store.describe_topic(t.name) for t in store.list_topics()]
    spans = [i.offsets for i in infos]
    if as_json:
        for i, span in zip(infos, spans, strict=True):
            print(json.dumps({"topic": i.name, "partitions": len(i.partitions),
                              "replication_factor": i.replication_factor, "offsets": span,
                              "size_bytes": i.size_bytes}))
        return
    from klog.cli.tables import print_table, size_cell

    print_table(["TOPIC", "PARTITIONS", "RF", "OFFSETS", "SIZE"],
                [[i.name, len(i.partitions), i.replication_factor, span, size_cell(i.size_bytes)]
                 for i, span in zip(infos, spans, strict=True)])


@app.command()
def describe(topic: str, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Per partition: leader, replicas, ISR, epoch, log start, high watermark, log end, size, segments,
    each replica's log end (RF > 1) and the dirty ratio (compacted topics)."""
    with open_store(data_dir, create=False, read_only=True) as store:
        info = store.describe_topic(topic)
        configs = store.effective_configs(topic)
        ratios = None
        if "compact" in configs["cleanup.policy"]:
            ratios = [store.dirty_ratio(topic, p.partition) for p in info.partitions]
            if None in ratios:  # a cluster's cleaner state is the broker's
                ratios = None
    if as_json:
        doc = {"topic": info.name, "topic_id": info.topic_id, "replication_factor": info.replication_factor,
               "configs": info.configs, "partitions": [vars(p) for p in info.partitions]}
        for part, ratio in zip(doc["partitions"], ratios or [], strict=False):
            part["dirty_ratio"] = round(ratio, 4)
        print(json.dumps(doc, default=str))
        return
    from klog.cli.tables import print_heading, print_table

    print_heading([f"Topic {info.name}", f"id {info.topic_id}", f"partitions {len(info.partitions)}",
                   f"replication factor {info.replication_factor}"])
    set_configs = [f"{k}={v}," for k, v in sorted(info.configs.items())] or ["(defaults)"]
    set_configs[-1] = set_configs[-1].rstrip(",")
    print_heading(["Configs:", *set_configs], gap=" ")
    del configs
    rows = [[p.partition, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)), p.leader_epoch,
             p.log_start_offset, p.high_watermark, p.log_end_offset, p.size_bytes, p.segments]
            for p in info.partitions]
    headings = ["PARTITION", "LEADER", "REPLICAS", "ISR", "EPOCH", "LOG-START", "HIGH-WATERMARK", "LOG-END",
                "SIZE", "SEGMENTS"]
    if any(len(p.replicas) > 1 for p in info.partitions):  # each replica's log end: how far an out-of-sync one lags
        headings.append("REPLICA-LOG-ENDS")
        for row, p in zip(rows, info.partitions, strict=True):
            row.append(",".join(f"{d}:{p.replica_log_end[d]}" if d in p.replica_log_end else f"{d}:-"
                                for d in p.replicas))
    if ratios is not None:  # compacted topics: the share of the cleanable log not yet compacted
        headings.append("DIRTY-RATIO")
        for row, ratio in zip(rows, ratios, strict=True):
            row.append(f"{ratio:.2f}")
    print_table(headings, rows)
    for p in info.partitions:
        if p.move:  # (a cluster's partitions have none)
            print(f"Partition {p.partition}: a move of its replica from log directory {p.move[0]} to {p.move[1]} is "
                  "pending (cut short); the next write to the partition finishes it or rolls it back")
    if any(p.segments is None for p in info.partitions):  # a cluster: say why the column is empty
        print("SEGMENTS -: a Kafka cluster does not report segment counts (no Kafka API gives them)")


@app.command()
def alter(
    topic: str,
    partitions: Annotated[int | None, typer.Option("--partitions", "-p", help="New (larger) partition count.")] = None,
    config: ConfigOpt = None,
    delete_config: Annotated[list[str] | None, typer.Option("--delete-config", help="Config to reset.")] = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add partitions, set configs, or reset configs to their defaults."""
    with open_store(data_dir, create=False) as store:
        meta = store.alter_topic(topic, partitions, parse_configs(config), delete_config or [])
    if as_json:
        print(json.dumps({"topic": meta.name, "partitions": len(meta.partitions), "configs": meta.configs}))
    else:
        print(f"Altered topic {meta.name}", file=sys.stderr)


def confirm_delete(topic: str) -> bool:
    """Ask on the terminal; False when the user declines (Ctrl-C or end of input still interrupt)."""
    return typer.confirm(f"Delete topic {topic} and all its records?")


@app.command()
def delete(
    topic: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a topic and all its data (asks first on a terminal)."""
    with open_store(data_dir, create=False) as store:
        store.topic(topic)
        if not yes and current_env().stdin_tty and not confirm_delete(topic):
            print("klog: aborted, nothing deleted", file=sys.stderr)
            raise typer.Exit(1)
        store.delete_topic(topic)
    if as_json:
        print(json.dumps({"deleted": topic}))
    else:
        print(f"Deleted topic {topic}", file=sys.stderr)


@app.command()
def reassign(
    topic: str,
    source: Annotated[int, typer.Option("--from", help="Log directory id to move replicas away from.")],
    target: Annotated[int, typer.Option("--to", help="Log directory id to move them to.")],
    partition: Annotated[list[int] | None, typer.Option("--partition", "-p", help="Only this partition.")] = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move replicas between log directories without losing or duplicating a record."""
    with open_store(data_dir, create=False) as store:
        parts = store.reassign(topic, source, target, partition)
    if as_json:
        print(json.dumps({"topic": topic, "moved": parts, "from": source, "to": target}))
    elif not parts:  # (moved before, by this command or another process: said, not "Moved 0 replicas")
        print(f"Moved nothing: no replica of {topic} is in log directory {source}", file=sys.stderr)
    else:
        print(f"Moved {len(parts)} replicas of {topic} from log directory {source} to {target}", file=sys.stderr)


def _print_cleanups(results, as_json: bool, verb: str) -> None:
    if as_json:
        for r in results:
            print(json.dumps(vars(r)))
        return
    # a compaction that removed and rewrote nothing (everything in the active segment) changed nothing
    changed = [r for r in results
               if r.records_removed or r.segments_rewritten or r.segments_deleted
               or r.log_start_after != r.log_start_before]
    for r in changed:  # partitions left as they were are only counted, in the summary
        parts = [f"log start {r.log_start_after}"]
        if r.segments_deleted:
            parts.append(f"{r.segments_deleted} segments ({r.bytes_deleted} bytes) deleted")
        if r.compacted:
            parts.append(f"compacted below offset {r.cleanable_end}: {r.records_removed} records removed "
                         f"({r.tombstones_removed} tombstones), {r.segments_rewritten} segments rewritten")
        elif r.dirty_ratio is not None:
            parts.append(f"dirty ratio {r.dirty_ratio:.2f}")
        print(f"{verb} {r.topic}-{r.partition}: {', '.join(parts)}", file=sys.stderr)
    from klog.cli.tables import human_size

    freed = sum(r.bytes_deleted for r in results)
    removed = sum(r.records_removed for r in results)
    print(f"{len(changed)} of {len(results)} partition{'' if len(results) == 1 else 's'} changed: "
          f"{sum(r.segments_deleted for r in results)} segments ({human_size(freed)}) deleted, "
          f"{removed} records compacted away", file=sys.stderr)


@app.command()
def clean(
    topic: Annotated[str | None, typer.Argument(help="Only this topic (default: every topic).")] = None,
    io_max_bytes_per_second: IoRateOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply retention (retention.ms, retention.bytes, log start) and compact where due, now."""
    throttler = _io_throttler(io_max_bytes_per_second)
    with open_store(data_dir, create=False) as store:
        results = store.clean(topic, throttler=throttler)
    _print_cleanups(results, as_json, "Cleaned")


@app.command("delete-records")
def delete_records(
    topic: str,
    before: Annotated[str, typer.Option("--before", help="An offset N, or a time (ISO 8601, or a span ago: 7d).")],
    partition: Annotated[list[int] | None, typer.Option("--partition", "-p", help="Only this partition.")] = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete every record before an offset or a time (kafka-delete-records): moves the log start up."""
    from klog.client.timespec import parse_time_ms

    text = before.strip()
    # isascii: str.isdigit also takes digits such as '²' that int() refuses
    kwargs = {"before_offset": int(text)} if text.isascii() and text.isdigit() else {"before_ms": parse_time_ms(text)}
    with open_store(data_dir, create=False) as store:
        results = store.delete_records(topic, partitions=partition, **kwargs)
    _print_cleanups(results, as_json, "Deleted records of")


@app.command()
def compact(
    topic: str,
    io_max_bytes_per_second: IoRateOpt = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compact a topic now (cleanup.policy=compact): keep the latest value per key, offsets unchanged."""
    throttler = _io_throttler(io_max_bytes_per_second)
    with open_store(data_dir, create=False) as store:
        results = store.compact(topic, throttler=throttler)
    _print_cleanups(results, as_json, "Compacted")


def _io_throttler(rate: float | None):  # noqa: ANN202 - klog.store.throttle.Throttler | None, loaded lazily
    if rate is None:
        return None
    if not rate > 0:
        from klog.errors import UsageError

        raise UsageError(f"--io-max-bytes-per-second must be above 0, not {rate:g}")
    from klog.store.throttle import cleaner_throttler

    return cleaner_throttler(rate)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="topics")
