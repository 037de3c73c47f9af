"""`klog offsets`, `klog dump`, `klog verify`."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store
from klog.cli.env import current_env
from klog.errors import UsageError

DISCARD_HELP = ("With --repair, when no intact replica holds damaged records: move the damaged batch aside "
                "into a .corrupt file. Only its offsets are lost (said exactly): the records before and after "
                "it stay, and readers step over the gap; asks first unless --yes.")
REPAIR_HELP = ("Rebuild indexes, truncate torn tails, re-copy damaged replicas from intact ones "
               "and catch up replicas that are out of sync.")


def register(app: typer.Typer) -> None:
    @app.command()
    def offsets(
        topic: str,
        time_spec: Annotated[str | None, typer.Option("--time", help="earliest | latest | a time (ISO, epoch ms, "
                                                                      "15m): first offset at or after it.")] = None,
        data_dir: DataDirOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Earliest, latest, or first offset at a time, per partition."""
        from klog.client.timespec import parse_time_ms

        with open_store(data_dir, create=False, read_only=True) as store:
            store.topic(topic)
            earliest = store.offsets(topic, -2)
            latest = store.offsets(topic, -1)
            at = None
            if time_spec not in (None, "earliest", "latest"):
                at = store.offsets(topic, parse_time_ms(time_spec))
        rows = []
        for p in sorted(earliest):
            row = {"topic": topic, "partition": p, "earliest": earliest[p], "latest": latest[p]}
            if at is not None:
                row["offset"] = at[p]
            elif time_spec in ("earliest", "latest"):
                row["offset"] = row[time_spec]
            rows.append(row)
        if as_json:
            for row in rows:
                print(json.dumps(row))
            return
        from klog.cli.tables import print_table

        cols = ["PARTITION", "EARLIEST", "LATEST"] + (["OFFSET"] if "offset" in rows[0] else [])
        print_table(cols, [[r["partition"], r["earliest"], r["latest"]]
                           + ([r["offset"] if r["offset"] is not None else "-"] if "offset" in r else [])
                           for r in rows])

    @app.command()
    def dump(
        path: Annotated[str, typer.Argument(help="A .log segment file, a partition folder, or TOPIC-PARTITION or "
                                                 "TOPIC of the store (its leader replica).")],
        records: Annotated[bool, typer.Option("--records/--batches", help="Show records (deep) or batches only.")]
        = True,
        data_dir: DataDirOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print the batches and records of a segment file or a partition folder (like kafka-dump-log)."""
        import itertools
        import os

        from klog.cli.output import bytes_to_json, terminal_safe
        from klog.store.inspect import dump_path

        def shown(data: bytes | None) -> str:  # record bytes never drive the terminal (nor a pager)
            return "null" if data is None else terminal_safe(data)

        items = itertools.chain.from_iterable(dump_path(p, deep=records) for p in _dump_paths(path, data_dir))
        for item in items:
            if as_json:
                if item["type"] == "record":
                    item = {**item, "key": bytes_to_json(item["key"]), "value": bytes_to_json(item["value"]),
                            "headers": [[k, bytes_to_json(v)] for k, v in item["headers"]]}
                print(json.dumps(item))
            elif item["type"] == "segment":
                print(f"Dumping {terminal_safe(os.fsencode(item['path']))}")
            elif item["type"] == "batch":
                print(f"baseOffset: {item['base_offset']} lastOffset: {item['last_offset']} "
                      f"count: {item['count']} position: {item['position']} size: {item['size']} "
                      f"CreateTime: {item['max_timestamp']} compression: {item['compression']} "
                      f"crc: {item['crc']} isvalid: {str(item['valid']).lower()} epoch: {item['leader_epoch']} "
                      f"magic: {item['magic']} producerId: {item['producer_id']} "
                      f"producerEpoch: {item['producer_epoch']} baseSequence: {item['base_sequence']} "
                      f"isTransactional: {str(item['transactional']).lower()} "
                      f"isControl: {str(item['control']).lower()}")
            elif "end_txn_marker" in item:
                print(f"| offset: {item['offset']} timestamp: {item['timestamp']} "
                      f"endTxnMarker: {item['end_txn_marker']} coordinatorEpoch: {item['coordinator_epoch']}")
            else:
                headers = ",".join(f"{shown(k.encode('utf-8', 'surrogateescape'))}={shown(v)}"
                                   for k, v in item["headers"])
                print(f"| offset: {item['offset']} timestamp: {item['timestamp']} key: {shown(item['key'])} "
                      f"headers: [{headers}] payload: {shown(item['value'])}")

    @app.command()
    def verify(
        topic: Annotated[str | None, typer.Argument(help="Topic to check (all when omitted).")] = None,
        repair: Annotated[bool, typer.Option("--repair", help=REPAIR_HELP)] = False,
        discard_damaged: Annotated[bool, typer.Option("--discard-damaged", help=DISCARD_HELP)] = False,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Discard without asking.")] = False,
        data_dir: DataDirOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Check every batch's CRC and every index; --repair fixes what it can and says what it did."""
        if discard_damaged:
            if not repair:
                raise UsageError("--discard-damaged is a repair: give --repair --discard-damaged")
            with open_store(data_dir, create=False) as store:
                _discard(store, topic, yes, as_json)
        with open_store(data_dir, create=False, read_only=not repair) as store:
            reports = store.verify(topic, repair=repair)
        bad = 0
        for r in reports:
            if as_json:
                print(json.dumps(r))
            else:
                status = "ok" if r["ok"] else ("repaired" if r["repaired"] else "DAMAGED")
                if r["topic"] is not None:  # a replica's, or (log_dir None) the whole partition's
                    what = f"{r['topic']}-{r['partition']}"
                    what += "" if r["log_dir"] is None else f" replica {r['log_dir']}"
                else:  # the store's own: a log directory's, or the metadata's (log_dir None)
                    what = "metadata" if r["log_dir"] is None else f"log directory {r['log_dir']}"
                print(f"{what}: {status}"
                      + (f" — {'; '.join(r['problems'])}" if r["problems"] else ""))
            bad += 0 if (r["ok"] or r["repaired"]) else 1
        if bad:
            raise typer.Exit(1)


def _discard(store, topic: str | None, yes: bool, as_json: bool) -> None:  # noqa: ANN001
    """--discard-damaged: say what would be lost, ask (or take --yes), then discard and say what was."""
    from klog.broker.verify import discard_damaged, plan_discards

    plans = plan_discards(store, topic)
    if not plans:
        return
    lost = "; ".join(f"{d.topic}-{d.partition} offsets {d.lost} (damaged)" for d in plans)
    if not yes:
        if not current_env().stdin_tty:
            raise UsageError(f"--discard-damaged would lose {lost} for good: add --yes (no terminal to ask on)")
        if not typer.confirm(f"Discard {lost} for good? The damaged bytes are kept in .corrupt files", default=False):
            raise typer.Exit(1)
    for d in discard_damaged(store, topic):
        if as_json:
            print(json.dumps({"topic": d.topic, "partition": d.partition, "discarded": True,
                              "lost_from": d.damaged_from, "lost_to": d.resume - 1, "damaged_from": d.damaged_from,
                              "corrupt_files": d.corrupt_files, "hanging": [
                                  {"producer_id": pid, "producer_epoch": epoch, "start_offset": start}
                                  for pid, epoch, start in d.hanging], "outcome_unknown": [
                                  {"producer_id": pid, "producer_epoch": epoch, "start_offset": start}
                                  for pid, epoch, start in d.unknown]}))
        else:
            hanging = "".join(
                f"; left open, its outcome lost with its marker: the transaction of producer id {pid} (epoch "
                f"{epoch}) from offset {start} (end it with `klog transactions abort --topic {d.topic} --partition "
                f"{d.partition} --start-offset {start}`)" for pid, epoch, start in d.hanging) + "".join(
                f"; its marker lost and its outcome not known: the transaction of producer id {pid} (epoch "
                f"{epoch}) from offset {start} now ends with its producer's next transaction here"
                for pid, epoch, start in d.unknown)
            print(f"{d.topic}-{d.partition}: discarded offsets {d.lost} (the damaged batch); the records before "
                  f"and after it stay, readers step over the gap; damaged bytes kept in "
                  f"{', '.join(d.corrupt_files)} (inspect them, then delete them){hanging}")


def _dump_paths(path: str, data_dir: str | None) -> list[str]:
    """A file or folder as given; otherwise a topic or TOPIC-PARTITION looked up in the store."""
    import os

    from klog.errors import UsageError

    if os.path.exists(path):
        return [path]
    with open_store(data_dir, create=False, read_only=True) as store:
        folders = store.partition_folders(path)
    if folders is None:
        raise UsageError(f"'{path}' is neither a file, a folder, a topic nor TOPIC-PARTITION of the store")
    return folders
