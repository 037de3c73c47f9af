"""`klog dirs list|add|remove|import|checkpoint`: the store's log directories (like kafka-log-dirs)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store

app = typer.Typer(help="List, add and remove log directories (disks) of the store.", no_args_is_help=True)


@app.command("list")
def list_(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Each log directory's health (ok, missing, read-only, full, replaced), size and replica count."""
    with open_store(data_dir, create=False, read_only=True) as store:
        infos = store.list_dirs()
    from klog.cli.tables import print_listing, size_cell

    print_listing(infos, ["ID", "PATH", "HEALTH", "SIZE", "REPLICAS", "LEADERS"],
                  lambda i: [i.id, i.path, i.health, size_cell(i.size_bytes), i.replicas, i.leaders], as_json)


@app.command()
def add(path: str, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Add a log directory (an empty or new folder, typically on another disk)."""
    with open_store(data_dir) as store:
        info = store.add_dir(path)
    print(json.dumps(vars(info)) if as_json else f"Added log directory {info.id}: {info.path}")


@app.command()
def remove(
    log_dir: Annotated[int, typer.Argument(help="Id of the log directory (see klog dirs list).")],
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move every replica off a log directory (caught up first, nothing lost), then remove it."""
    with open_store(data_dir, create=False) as store:
        moved = store.remove_dir(log_dir)
    print(json.dumps({"removed": log_dir, "replicas_moved": moved}) if as_json
          else f"Removed log directory {log_dir} ({moved} replicas moved)")


@app.command("import")
def import_(
    paths: Annotated[list[str], typer.Argument(help="A Kafka broker's log directory, or <topic>-<partition> "
                                                    "folders.")],
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Adopt a Kafka broker's log directory: topics, offsets, leader epochs, log start offsets, and
    the groups' committed offsets from its __consumer_offsets.

    The source is only read (its files are copied). Segments of every message format (v0, v1, v2)
    keep their offsets; the data is readable at once (high watermark = log end). An existing
    topic is refused.
    """
    from klog.broker.importer import import_dirs, import_kafka_offsets

    with open_store(data_dir) as store:
        imported = import_dirs(store, paths)
        offsets = import_kafka_offsets(store, paths)  # the broker's committed offsets come along
    for i in imported:
        if as_json:
            print(json.dumps(vars(i)))
            continue
        print(f"Imported {i.topic}-{i.partition} from {i.source}: {i.segments} segments, offsets "
              f"{i.log_start_offset}..{i.log_end_offset}, leader epoch {i.leader_epoch}")
        for note in i.notes:
            print(f"  {note}")
    if offsets is not None:
        if as_json:
            print(json.dumps({"committed_offsets": vars(offsets)}))
        else:
            print(f"Imported {offsets.offsets} committed offsets of {offsets.groups} groups from __consumer_offsets"
                  + (f" ({offsets.skipped} of topics not imported left out)" if offsets.skipped else ""))
            if offsets.unreadable:
                print(f"  {offsets.unreadable} records of __consumer_offsets not in Kafka's format were left out")


@app.command()
def checkpoint(data_dir: DataDirOpt = None) -> None:
    """Write Kafka's checkpoint files now (recovery points, high watermarks, log starts, leader epochs,
    topic ids, meta.properties), e.g. before handing the log directories to a Kafka broker.

    klog also keeps them current after every command that writes.
    """
    with open_store(data_dir, create=False) as store:
        store.write_kafka_checkpoints()
    print("Wrote Kafka's checkpoint files")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="dirs")
