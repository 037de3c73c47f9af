"""Partition assignors, by Kafka's `partition.assignment.strategy` names. Pure functions.

Each takes member id -> subscribed topics, topic -> partition count, and member id -> its current
target (only cooperative-sticky looks at that), and returns member id -> partitions. Members are
taken in member-id order, as Kafka's assignors sort them, so every process computes the same result.
"""

from __future__ import annotations

from klog.errors import UsageError

TP = tuple[str, int]
EAGER = ("range", "roundrobin")
COOPERATIVE = ("cooperative-sticky",)
NAMES = EAGER + COOPERATIVE


def validate(name: str) -> str:
    if name not in NAMES:
        raise UsageError(f"unknown assignor '{name}': use one of {', '.join(NAMES)}")
    return name


def range_assign(subs: dict[str, list[str]], counts: dict[str, int]) -> dict[str, list[TP]]:
    """Per topic: consecutive runs of partitions; the first members get one extra when it does not divide."""
    out: dict[str, list[TP]] = {m: [] for m in subs}
    for topic in sorted({t for ts in subs.values() for t in ts}):
        members = sorted(m for m, ts in subs.items() if topic in ts)
        per, extra = divmod(counts.get(topic, 0), len(members))
        start = 0
        for i, m in enumerate(members):
            n = per + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + n))
            start += n
    return out


def roundrobin_assign(subs: dict[str, list[str]], counts: dict[str, int]) -> dict[str, list[TP]]:
    """All partitions in (topic, partition) order dealt to members in turn, skipping non-subscribers."""
    out: dict[str, list[TP]] = {m: [] for m in subs}
    members = sorted(subs)
    turn = 0
    for topic in sorted({t for ts in subs.values() for t in ts}):
        for p in range(counts.get(topic, 0)):
            for _ in range(len(members)):  # bounded: at least one member subscribes to `topic`
                m = members[turn % len(members)]
                turn += 1
                if topic in subs[m]:
                    out[m].append((topic, p))
                    break
    return out


def sticky_assign(subs: dict[str, list[str]], counts: dict[str, int],
                  current: dict[str, list[TP]]) -> dict[str, list[TP]]:
    """Balanced (counts differ by at most one where subscriptions allow) while moving as few as possible."""
    valid = {(t, p) for t in {t for ts in subs.values() for t in ts} for p in range(counts.get(t, 0))}
    out: dict[str, list[TP]] = {m: [] for m in subs}
    taken: set[TP] = set()
    for m in sorted(subs):
        for tp in sorted(current.get(m, [])):
            if tp in valid and tp not in taken and tp[0] in subs[m]:
                out[m].append(tp)
                taken.add(tp)
    quota_max = -(-len(valid) // len(subs))  # ceil: nobody keeps more than this
    quota_min = len(valid) // len(subs)
    extra_allowed = len(valid) - quota_min * len(subs)  # how many members may hold quota_min + 1
    for m in sorted(subs, key=lambda m: (-len(out[m]), m)):
        keep = quota_max if extra_allowed > 0 and len(out[m]) >= quota_max else quota_min
        if keep == quota_max and quota_max != quota_min:
            extra_allowed -= 1
        while len(out[m]) > keep:
            taken.discard(out[m].pop())  # the highest partitions move
    for tp in sorted(valid - taken):
        eligible = [m for m in subs if tp[0] in subs[m]]
        m = min(eligible, key=lambda m: (len(out[m]), m))
        out[m].append(tp)
    return {m: sorted(tps) for m, tps in out.items()}


def assign(name: str, subs: dict[str, list[str]], counts: dict[str, int],
           current: dict[str, list[TP]]) -> dict[str, list[TP]]:
    if name == "range":
        return range_assign(subs, counts)
    if name == "roundrobin":
        return roundrobin_assign(subs, counts)
    if name == "cooperative-sticky":
        return sticky_assign(subs, counts, current)
    raise UsageError(f"unknown assignor '{name}'")
