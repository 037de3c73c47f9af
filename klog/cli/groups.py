"""`klog groups list|describe|reset-offsets|delete|delete-offsets` (like kafka-consumer-groups)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store
from klog.errors import UsageError

app = typer.Typer(help="List, describe (lag), reset offsets of, and delete consumer groups. Groups of Kafka "
                  "clients served by klog serve are included.", no_args_is_help=True)

TopicScopeOpt = Annotated[list[str] | None, typer.Option(
    "--topic", "-t", help="TOPIC or TOPIC:P[,P...] (repeatable).")]


def _dash(value: object) -> object:
    return "-" if value is None else value


@app.command("list")
def list_(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every group: state (Stable, PreparingRebalance, Empty), live members, generation, assignor, topics."""
    with open_store(data_dir, create=False, read_only=True) as store:
        groups = store.list_groups()
    from klog.cli.tables import print_listing

    print_listing(groups, ["GROUP", "STATE", "MEMBERS", "GENERATION", "ASSIGNOR", "TOPICS"],
                  lambda g: [g.group, g.state, g.members, g.generation, _dash(g.assignor), ",".join(g.topics) or "-"],
                  as_json)


@app.command()
def describe(
    group: str,
    members: Annotated[bool, typer.Option("--members", help="List the live members instead of partitions.")] = False,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per partition: committed offset, log start, log end, lag, and the member reading it (host, pid; for a
    Kafka client of klog serve, the client's address and the server's pid)."""
    with open_store(data_dir, create=False, read_only=True) as store:
        d = store.describe_group(group)
    if as_json:
        doc = {"group": d.group, "state": d.state, "generation": d.generation, "assignor": d.assignor,
               "members": [vars(m) for m in d.members], "partitions": [vars(p) for p in d.partitions]}
        print(json.dumps(doc))
        return
    from klog.cli.output import terminal_safe
    from klog.cli.tables import print_table

    print(f"group {terminal_safe(d.group.encode())}: {d.state}, generation {_dash(d.generation)}, "
          f"assignor {_dash(d.assignor)}, {len(d.members)} live member(s)", file=sys.stderr)
    if members:
        print_table(["MEMBER", "CLIENT-ID", "HOST", "PID", "PARTITIONS"],
                    [[m.member_id, m.client_id, m.host, m.pid, ",".join(f"{t}-{p}" for t, p in m.partitions) or "-"]
                     for m in d.members])
        return
    print_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-START", "LOG-END", "LAG", "MEMBER", "HOST", "PID"],
                [[p.topic, p.partition, _dash(p.committed), p.log_start, p.log_end, _dash(p.lag),
                  _dash(p.member_id), _dash(p.host), _dash(p.pid)] for p in d.partitions])


def _reset_spec(to_earliest: bool, to_latest: bool, to_offset: int | None, to_datetime: str | None,
                by_duration: str | None, shift_by: int | None, to_current: bool):  # noqa: ANN202 - ResetSpec
    from klog.client.groups_admin import ResetSpec
    from klog.client.timespec import parse_span_ms, parse_time_ms

    chosen = [name for name, v in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                   ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime),
                                   ("--by-duration", by_duration), ("--shift-by", shift_by is not None),
                                   ("--to-current", to_current)) if v]
    if len(chosen) != 1:
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                         "--by-duration, --shift-by, --to-current" + (f" (got {', '.join(chosen)})" if chosen else ""))
    if to_offset is not None:
        return ResetSpec("offset", to_offset)
    if to_datetime is not None:
        return ResetSpec("datetime", parse_time_ms(to_datetime))
    if by_duration is not None:
        return ResetSpec("duration", parse_span_ms(by_duration))
    if shift_by is not None:
        return ResetSpec("shift", shift_by)
    return ResetSpec("earliest" if to_earliest else "latest" if to_latest else "current")


@app.command("reset-offsets", help="Move a group's committed offsets: a dry run prints the plan, --execute "
             "applies it (refused while the group has live members); new offsets stay between the log start and "
             "the log end.")
def reset_offsets(
    group: str,
    topic: TopicScopeOpt = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Every topic the group has offsets for or its "
                                             "live members read.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="To the log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="To the log end (skip everything).")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="To offset N.")] = None,
    to_datetime: Annotated[str | None, typer.Option("--to-datetime", help="To the first record at or after a "
                                                                          "time (ISO, epoch ms).")] = None,
    by_duration: Annotated[str | None, typer.Option("--by-duration", help="To the first record of D ago "
                                                                          "(90s, 15m, 2h, 7d; ISO 8601's PT1H).")]
    = None,
    shift_by: Annotated[int | None, typer.Option("--shift-by", help="Move the committed offset by N (+/-).")] = None,
    to_current: Annotated[bool, typer.Option("--to-current", help="To the committed offset (log end if none).")]
    = False,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (default: dry run, print it).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, change nothing (the default; Kafka's "
                                          "spelling).")] = False,
    export: Annotated[bool, typer.Option("--export", help="Print the plan as CSV: topic,partition,offset.")] = False,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    if dry_run and execute:
        raise UsageError("use --dry-run or --execute, not both")
    spec = _reset_spec(to_earliest, to_latest, to_offset, to_datetime, by_duration, shift_by, to_current)
    live = []
    with open_store(data_dir, create=False) as store:
        plan = store.plan_offset_reset(group, spec, topic or [], all_topics)
        if execute:
            store.reset_group_offsets(group, plan)
        else:
            live = store.group_members(group)
    if export:
        for r in plan:
            print(f"{r.topic},{r.partition},{r.new_offset}")
    elif as_json:
        for r in plan:
            print(json.dumps({"group": group, **vars(r)}))
    else:
        from klog.cli.tables import print_table

        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "LOG-END"],
                    [[group, r.topic, r.partition, _dash(r.current), r.new_offset, r.log_start, r.log_end]
                     for r in plan])
    if not execute:
        print("dry run: nothing changed (add --execute to apply)", file=sys.stderr)
    if live:
        who = ", ".join(f"{m.member_id} (pid {m.pid} on {m.host})" for m in live[:3])
        who += f" and {len(live) - 3} more" if len(live) > 3 else ""
        print(f"note: group {group} has {len(live)} live member(s): {who}; --execute will be refused until they "
              "stop", file=sys.stderr)


@app.command()
def delete(group: str, data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a group and its committed offsets (refused while it has live members)."""
    with open_store(data_dir, create=False) as store:
        count = store.delete_group(group)
    print(json.dumps({"deleted": group, "offsets": count}) if as_json
          else f"Deleted group {group} ({count} committed offsets)")


@app.command("delete-offsets")
def delete_offsets_(
    group: str,
    topic: Annotated[list[str], typer.Option("--topic", "-t", help="TOPIC or TOPIC:P[,P...] (repeatable).")],
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a group's committed offsets for topics or partitions (refused while a live member reads them)."""
    with open_store(data_dir, create=False) as store:
        gone = [tp for scope in topic for tp in store.delete_group_offsets(group, scope)]
    if as_json:
        print(json.dumps({"group": group, "deleted": [list(tp) for tp in gone]}))
    else:
        print(f"Deleted {len(gone)} committed offset(s) of group {group}")


@app.command(help="Expire committed offsets now, as a Kafka broker (and klog serve, every "
             "offsets.retention.check.interval.ms) does: an Empty group's offsets go together "
             "offsets.retention.minutes (klog.json; 7 days) after it became Empty; offsets without a group "
             "(standalone commits) each that long after their commit; a Stable group's offsets of topics it no "
             "longer reads likewise. An Empty group left without offsets is removed.")
def clean(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    with open_store(data_dir, create=False) as store:
        results = store.expire_group_offsets()
    for r in results:
        if as_json:
            print(json.dumps({"group": r.group, "expired": [list(tp) for tp in r.partitions],
                              "removed": r.group_removed}))
            continue
        from klog.cli.output import terminal_safe

        what = f"Expired {len(r.partitions)} committed offset(s) of group {terminal_safe(r.group.encode())}"
        if r.partitions:
            what += " (" + ", ".join(f"{t}-{p}" for t, p in r.partitions[:5]) + (", ..." if len(r.partitions) > 5
                                                                                else "") + ")"
        print(what + ("; removed the group (Empty, no offsets left)" if r.group_removed else ""), file=sys.stderr)
    if not as_json:
        print(f"{len(results)} group(s) changed", file=sys.stderr)


def register(root: typer.Typer) -> None:
    """Add `klog groups ...` to the root app."""
    root.add_typer(app, name="groups")
