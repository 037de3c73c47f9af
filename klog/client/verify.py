"""`klog verify`: check every replica's batches and indexes; optionally repair.

Repair rebuilds indexes and truncates a torn tail; a replica damaged before its tail is cut at
the damage and re-copied from an in-sync replica that is intact (Kafka does not do this). It
also catches up replicas that are out of sync but healthy again, which otherwise waits for the
partition's next write.
"""

from __future__ import annotations

from klog.client.replication import ReplicaManager, catch_up
from klog.errors import KlogError
from klog.store.inspect import check_segment


def verify_store(store, topic: str | None = None, repair: bool = False) -> list[dict]:
    topics = [topic] if topic else store.topic_names()
    reports = []
    for name in topics:
        meta = store.topic(name)
        for p in range(len(meta.partitions)):
            part = store.partition(name, p)
            pm = meta.partitions[p]
            order = [pm.leader] + [r for r in pm.isr if r != pm.leader]
            part.set_replica_dirs([store.data_dir.log_dir_path(d) for d in order])
            checked = [(d, replica, _check_replica(replica)) for d, replica in zip(order, part.replicas, strict=True)]
            for d, replica, (problems, fixable_at) in checked:
                report = {"topic": name, "partition": p, "log_dir": d, "ok": not problems, "repaired": False,
                          "problems": list(problems)}
                if repair and problems:
                    healthy = next((r for _, r, (probs, _) in checked if not probs and r is not replica), None)
                    report["repaired"] = _repair(part, replica, fixable_at, healthy, report["problems"])
                reports.append(report)
            if repair:
                reports.extend(_rejoin(store, name, p, part))
    if topic is None:
        reports.extend(_unknown_partition_folders(store))
    return reports


def _unknown_partition_folders(store) -> list[dict]:
    """Partition folders no topic owns (a Kafka broker's, copied in by hand): never touched, and
    the report says how to adopt them."""
    import os

    from klog.store.format import LOG_SUFFIX, parse_partition_dir

    reports = []
    for d in store.log_dir_ids():
        path = store.data_dir.log_dir_path(d)
        try:
            names = sorted(os.listdir(path))
        except OSError:
            continue
        for n in names:
            parsed = parse_partition_dir(n)
            folder = os.path.join(path, n)
            if parsed is None or not os.path.isdir(folder):
                continue
            t, p = parsed
            meta = store.topics.find(t)
            if meta is not None and p < len(meta.partitions):
                continue
            if not any(f.endswith(LOG_SUFFIX) for f in os.listdir(folder)):
                continue
            reports.append({"topic": t, "partition": p, "log_dir": d, "ok": False, "repaired": False,
                            "problems": [f"{folder}: a partition folder no topic of this store owns (left as it "
                                         f"is); adopt it with: klog dirs import {folder}"]})
    return reports


def _rejoin(store, topic: str, partition: int, part) -> list[dict]:
    """Catch up the healthy out-of-sync replicas now; one report for each that rejoined."""
    before = set(store.topics.get(topic).partitions[partition].isr)
    try:
        with part.lock:
            after = ReplicaManager(store).reconcile(topic, partition, part).isr
    except KlogError as e:  # e.g. no leader: reported, and the other partitions still get checked
        return [{"topic": topic, "partition": partition, "log_dir": None, "ok": False, "repaired": False,
                 "problems": [str(e)]}]
    return [{"topic": topic, "partition": partition, "log_dir": d, "ok": False, "repaired": True,
             "problems": ["repaired: caught up from the leader and rejoined the ISR"]}
            for d in after if d not in before]


def _check_replica(replica) -> tuple[list[str], int | None]:
    """Problems found, and the offset to truncate at when the log itself is damaged."""
    replica.refresh_segments()
    problems: list[str] = []
    cut_at = None
    for i, base in enumerate(replica.bases):
        segment = replica.segments[base]
        check = check_segment(segment)
        if check.index_problems:  # one line per segment: a broken index can have millions of bad entries
            more = len(check.index_problems) - 1
            problems.append(f"{segment.offset_index.path}: {len(check.index_problems)} index problems: "
                            f"{check.index_problems[0]}" + (f" (and {more} more)" if more else ""))
        if check.log_problem:
            last = i == len(replica.bases) - 1
            problems.append(f"{segment.log_path}: {check.log_problem}" + ("" if last else " (before the log's tail)"))
            cut_at = check.valid_next_offset if check.valid_next_offset is not None else base
            break
    return problems, cut_at


def _repair(part, replica, cut_at: int | None, healthy, notes: list[str]) -> bool:
    with part.lock:
        part.open_for_write()
        if cut_at is None:
            for base in list(replica.bases):
                replica.segments[base].recover()
            notes.append("repaired: rebuilt indexes")
            return True
        replica.truncate_to(cut_at)
        notes.append(f"repaired: truncated at offset {cut_at}")
        if healthy is not None:
            end = catch_up(healthy, replica, healthy.log_end_offset)
            notes.append(f"repaired: re-copied offsets {cut_at}..{end} from {healthy.directory}")
        elif cut_at < part.high_watermark():
            notes.append(f"records from offset {cut_at} were lost: no intact replica holds them")
            return False
        part.publish()
    return True
