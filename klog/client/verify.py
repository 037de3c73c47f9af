"""`klog verify`: check every replica's batches and indexes; optionally repair."""

from __future__ import annotations

from klog.store.inspect import check_segment


def verify_store(store, topic: str | None = None, repair: bool = False) -> list[dict]:
    topics = [topic] if topic else store.topic_names()
    reports = []
    for name in topics:
        meta = store.topic(name)
        for p in range(len(meta.partitions)):
            part = store.partition(name, p)
            pm = meta.partitions[p]
            for log_dir, replica in zip([pm.leader] + [r for r in pm.replicas if r != pm.leader], part.replicas,
                                        strict=False):
                reports.append(_verify_replica(name, p, log_dir, part, replica, repair))
    return reports


def _verify_replica(topic: str, p: int, log_dir: int, part, replica, repair: bool) -> dict:
    replica.refresh_segments()
    problems: list[str] = []
    repaired = False
    bases = list(replica.bases)
    for i, base in enumerate(bases):
        check = check_segment(replica.segments[base])
        is_last = i == len(bases) - 1
        if check.log_problem:
            where = f"{replica.segments[base].log_path}: {check.log_problem}"
            problems.append(where if is_last else where + " (before the log's tail: not truncated)")
        problems.extend(f"{replica.segments[base].offset_index.path}: {x}" for x in check.index_problems)
        if repair and (check.index_problems or (check.log_problem and is_last)):
            with part.lock:
                result = replica.segments[base].recover()
                replica.refresh_segments()
            repaired = True
            if result.truncated_bytes:
                problems.append(f"repaired: truncated {result.truncated_bytes} bytes at position "
                                f"{result.valid_bytes}")
            if check.index_problems:
                problems.append("repaired: rebuilt indexes")
    ok = not problems
    mid_log_damage = any("before the log's tail" in x for x in problems)
    return {"topic": topic, "partition": p, "log_dir": log_dir, "ok": ok, "repaired": repaired and not mid_log_damage,
            "problems": problems}
