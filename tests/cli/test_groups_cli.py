"""Consumer groups from the shell: `klog consume --group/--exec` across real processes, `klog groups`.

Goal: the issue's proofs as a user would run them: three `klog consume -G` processes split six
partitions, a fourth spreads them, a clean leave and a SIGKILL hand partitions over (the SIGKILL
within the session timeout plus a second), every record is printed at least once, and twice only
when the process that first printed it was killed; `--exec` failing on a record resumes there.
Method: real subprocesses (`python -m klog`) writing `partition offset` lines to files; the group
as LMDB holds it is read through the library while they run.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog.meta.groups import GroupsMeta
from tests.conftest import REPO

SESSION_TIMEOUT_MS = 3000
WAIT_S_MAX = 30  # generous bound for conditions on a loaded 2-core machine (not a speed claim)


def _restore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Member:
    """One `klog consume t -G g -f` process printing `partition offset` per record into a file."""

    def __init__(self, data_dir: str, tmp_path, name: str, *extra: str) -> None:
        self.path = tmp_path / f"{name}.out"
        env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
        args = [sys.executable, "-m", "klog", "consume", "t", "-G", "g", "-f", "-F", "%p %o\\n",
                "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}", "-X", "heartbeat.interval.ms=200", *extra]
        with open(self.path, "wb") as out, open(tmp_path / f"{name}.err", "wb") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, env=env, preexec_fn=_restore_sigint)
        self.err_path = tmp_path / f"{name}.err"

    def lines(self) -> list[tuple[int, int]]:
        text = self.path.read_bytes().decode()
        complete = text[: text.rfind("\n") + 1]  # a killed process may leave half a line
        return [tuple(map(int, line.split())) for line in complete.splitlines()]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=WAIT_S_MAX)


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S_MAX
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def held_by_pid(data_dir: str) -> dict[int, list[int]]:
    with klog.open(data_dir) as store:
        snap = GroupsMeta(store.meta).snapshot("g")
    if snap.doc is None:
        return {}
    return {m.pid: [p for _, p in snap.doc.owned_by(m.member_id)] for m in snap.live}


def spread(data_dir: str, pids: list[int]) -> list[int]:
    held = held_by_pid(data_dir)
    if sorted(held) != sorted(pids):
        return []
    return sorted(len(v) for v in held.values())


def produce(data_dir: str, start: int, count: int) -> None:
    with klog.open(data_dir) as store, store.producer() as p:
        for i in range(start, start + count):
            p.send("t", b"%d" % i, partition=i % 6)


def all_committed(data_dir: str) -> bool:
    with klog.open(data_dir) as store:
        committed = GroupsMeta(store.meta).committed("g")
        ends = store.offsets("t")
    return all(committed.get(("t", p)) is not None and committed[("t", p)].offset == ends[p] for p in ends)


def expected(data_dir: str) -> set[tuple[int, int]]:
    with klog.open(data_dir) as store:
        return {(p, o) for p, end in store.offsets("t").items() for o in range(end)}


@pytest.mark.slow
@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_processes_split_partitions_rebalance_and_survive_sigkill(data_dir, tmp_path, klog_proc, assignor) -> None:
    assert klog_proc("topics", "create", "t", "-p", "6").returncode == 0
    produce(data_dir, 0, 600)
    strategy = ("-X", f"partition.assignment.strategy={assignor}")
    members = [Member(data_dir, tmp_path, f"m{i}", *strategy) for i in range(3)]
    pids = [m.proc.pid for m in members]
    wait_for(lambda: spread(data_dir, pids) == [2, 2, 2], "three members with two partitions each")
    produce(data_dir, 600, 600)
    members.append(Member(data_dir, tmp_path, "m3", *strategy))
    pids.append(members[-1].proc.pid)
    wait_for(lambda: spread(data_dir, pids) == [1, 1, 2, 2], "a fourth member to get partitions")
    produce(data_dir, 1200, 600)
    wait_for(lambda: all_committed(data_dir), "everything committed")

    # a clean leave (SIGTERM: leave the group, like Ctrl-C, exit 143)
    leaver = members.pop(0)
    assert leaver.stop() == 143
    pids.remove(leaver.proc.pid)
    wait_for(lambda: spread(data_dir, pids) == [2, 2, 2], "the leaver's partitions to move")
    produce(data_dir, 1800, 600)
    wait_for(lambda: all_committed(data_dir), "everything committed after the leave")
    seen = collections.Counter(line for m in [leaver, *members] for line in m.lines())
    assert set(seen) == expected(data_dir)
    assert [rec for rec, n in seen.items() if n > 1] == []  # only clean joins and leaves so far: none twice

    # SIGKILL: its partitions move to the others within the session timeout plus a second
    victim = members.pop(0)
    victim_held = held_by_pid(data_dir)[victim.proc.pid]
    assert victim_held
    produce(data_dir, 2400, 600)
    victim.proc.kill()
    killed_at = time.monotonic()
    victim.proc.wait()
    pids.remove(victim.proc.pid)
    wait_for(lambda: sorted(p for v in held_by_pid(data_dir).values() for p in v) == list(range(6)),
             "the killed member's partitions to move")
    assert time.monotonic() - killed_at <= SESSION_TIMEOUT_MS / 1000 + 1
    assert spread(data_dir, pids) == [3, 3]
    produce(data_dir, 3000, 600)
    wait_for(lambda: all_committed(data_dir), "everything committed after the kill")
    for m in members:
        assert m.stop() == 143
    everyone = [leaver, victim, *members]
    seen = collections.Counter(line for m in everyone for line in m.lines())
    assert set(seen) == expected(data_dir)  # none lost
    victim_lines = set(victim.lines())
    twice = {rec for rec, n in seen.items() if n > 1}
    assert twice <= victim_lines  # redone only where the killed process had not committed
    assert all(p in victim_held for p, _ in twice)
    for m in everyone:
        assert "Traceback" not in m.err_path.read_text()


@pytest.mark.slow
def test_a_stalled_member_is_expelled_after_the_session_timeout_and_rejoins(data_dir, tmp_path, klog_proc) -> None:
    """SIGSTOP: the process lives (its pid checks out) but stops heartbeating; after session.timeout.ms
    (plus a second) the other member holds everything; after SIGCONT it notices, rejoins, shares again."""
    assert klog_proc("topics", "create", "t", "-p", "6").returncode == 0
    produce(data_dir, 0, 60)
    members = [Member(data_dir, tmp_path, f"m{i}") for i in range(2)]
    pids = [m.proc.pid for m in members]
    wait_for(lambda: spread(data_dir, pids) == [3, 3], "two members with three partitions each")
    stalled, other = members
    stalled.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    wait_for(lambda: held_by_pid(data_dir).get(other.proc.pid, []) == list(range(6)), "the stalled one's partitions")
    assert time.monotonic() - stopped_at <= SESSION_TIMEOUT_MS / 1000 + 1
    assert stalled.proc.pid not in held_by_pid(data_dir)  # expelled, not just outvoted
    stalled.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: spread(data_dir, pids) == [3, 3], "the stalled member to rejoin")
    produce(data_dir, 60, 60)
    wait_for(lambda: all_committed(data_dir), "everything committed")
    for m in members:
        assert m.stop() == 143
    seen = {line for m in members for line in m.lines()}
    assert seen == expected(data_dir)
    assert "Traceback" not in stalled.err_path.read_text()


def test_exec_failure_stops_uncommitted_and_a_rerun_resumes_at_that_record(cli, data_dir, tmp_path) -> None:
    cli("topics", "create", "t", "-p", "1")
    cli("produce", "t", input=b"".join(b"%d\n" % i for i in range(1, 11)))
    done = tmp_path / "done.txt"
    failing = f'v=$(cat); [ "$v" != 6 ] && echo "$v@$KLOG_OFFSET" >> {done}'
    r = cli("consume", "t", "-G", "g", "--exec", failing)
    assert r.exit_code == 1
    assert r.stderr == ("klog: error: --exec command exited 1 at t-0 offset 5; it and later records are not "
                        "committed, so a rerun starts there\n")
    assert done.read_text().split() == [f"{v}@{v - 1}" for v in range(1, 6)]
    with klog.open(data_dir) as store:
        assert GroupsMeta(store.meta).committed("g")[("t", 0)].offset == 5
    r = cli("consume", "t", "-G", "g", "--exec", f'cat >> {done}; echo >> {done}')
    assert r.exit_code == 0
    assert done.read_text().split()[5:] == [str(v) for v in range(6, 11)]  # resumed at the failed record


def test_exec_batches_get_values_one_per_line(cli, tmp_path) -> None:
    cli("topics", "create", "t", "-p", "1")
    cli("produce", "t", input=b"a\nb\nc\nd\ne\n")
    log = tmp_path / "runs.txt"
    r = cli("consume", "t", "-G", "g", "--exec", f'echo "$KLOG_OFFSET $KLOG_COUNT $(tr "\\n" ,)" >> {log}',
            "--batch", "2")
    assert r.exit_code == 0
    assert log.read_text().splitlines() == ["0 2 a,b,", "2 2 c,d,", "4 1 e,"]
    log.unlink()
    assert cli("consume", "t", "--exec", f'echo "$KLOG_OFFSET $(tr "\\n" ,)" >> {log}', "--batch", "3").exit_code == 0
    assert log.read_text().splitlines() == ["0 a,b,c,", "3 d,e,"]  # without a group: no commits, same batches
    r = cli("consume", "t", "--exec", "exit 3")
    assert (r.exit_code, r.stderr) == (1, "klog: error: --exec command exited 3 at t-0 offset 0\n")


def test_group_consume_resumes_and_two_groups_each_see_all(cli) -> None:
    cli("topics", "create", "t", "-p", "3")
    cli("produce", "t", input=b"".join(b"%d\n" % i for i in range(30)))
    first = cli("consume", "t", "-G", "a", "-n", "10")
    rest = cli("consume", "t", "-G", "a")
    assert len(first.out.split()) == 10 and len(rest.out.split()) == 20
    assert sorted(first.out.split() + rest.out.split(), key=int) == [str(i) for i in range(30)]
    assert cli("consume", "t", "-G", "a").stdout == b""  # all committed
    other = cli("consume", "t", "-G", "b")
    assert sorted(other.out.split(), key=int) == [str(i) for i in range(30)]
    late = cli("consume", "t", "-G", "c", "-o", "end")
    assert late.stdout == b""


def test_groups_list_describe_and_reset_tables(cli, data_dir) -> None:
    cli("topics", "create", "t", "-p", "2")
    cli("produce", "t", "-p", "0", input=b"".join(b"%d\n" % i for i in range(10)))
    cli("consume", "t", "-G", "g", "-n", "4")
    r = cli("groups", "list")
    assert r.out.splitlines() == ["GROUP  STATE  MEMBERS  GENERATION  ASSIGNOR  TOPICS",
                                  "g      Empty  0        2           range     t"]
    r = cli("groups", "describe", "g")
    assert r.stderr == "group g: Empty, generation 2, assignor range, 0 live member(s)\n"
    assert r.out.splitlines() == [
        "TOPIC  PARTITION  CURRENT-OFFSET  LOG-START  LOG-END  LAG  MEMBER  HOST  PID",
        "t      0          4               0          10       6    -       -     -",
        "t      1          0               0          0        0    -       -     -"]  # (where it started, as Kafka's)
    r = cli("groups", "reset-offsets", "g", "--topic", "t:0", "--shift-by", "-3")
    assert r.exit_code == 0 and "dry run" in r.stderr
    assert r.out.splitlines()[1].split() == ["g", "t", "0", "4", "1", "0", "10"]
    assert cli("groups", "reset-offsets", "g", "--topic", "t", "--to-latest", "--export").out == "t,0,10\nt,1,0\n"
    # time specs as users type them: every record is from the last hour, none from the year 2999
    for spec, new_offset in ((["--by-duration", "1h"], 0), (["--to-datetime", "2999-01-01T00:00:00Z"], 10),
                             (["--to-datetime", "2000-01-01"], 0), (["--to-current"], 4)):
        assert cli("groups", "reset-offsets", "g", "-t", "t:0", *spec, "--export").out == f"t,0,{new_offset}\n"
    r = cli("groups", "reset-offsets", "g", "-t", "t", "--by-duration", "soon")
    assert (r.exit_code, r.stderr) == (2, "klog: error: invalid duration 'soon': use e.g. 90s, 15m, 2h, 7d (or ISO "
                                          "8601's PT1H)\n")
    r = cli("groups", "reset-offsets", "g", "--all-topics", "--to-offset", "8", "--execute", "--json")
    assert r.exit_code == 0 and "dry run" not in r.stderr
    with klog.open(data_dir) as store:
        assert {tp: c.offset for tp, c in GroupsMeta(store.meta).committed("g").items()} == {
            ("t", 0): 8, ("t", 1): 0}
    assert cli("consume", "t", "-G", "g").stdout == b"8\n9\n"


def test_reset_is_refused_while_a_member_is_live(cli, data_dir, store) -> None:
    store.create_topic("t", partitions=1)
    with store.group_consumer("g", "t"):
        r = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute")
        assert r.exit_code == 1
        assert r.stderr.startswith("klog: error: cannot reset offsets: group 'g' has 1 live member(s): klog-")
        assert r.stderr.rstrip().endswith("stop them first")
        r = cli("groups", "describe", "g", "--members")
        assert f" {os.getpid()} " in r.out.splitlines()[1] and r.out.splitlines()[1].endswith("t-0")
        assert cli("groups", "delete", "g").exit_code == 1
    assert cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute").exit_code == 0
    assert cli("groups", "delete-offsets", "g", "--topic", "t").out == "Deleted 1 committed offset(s) of group g\n"
    assert cli("groups", "delete", "g").out == "Deleted group g (0 committed offsets)\n"
    r = cli("groups", "describe", "g")
    assert (r.exit_code, r.stderr) == (1, "klog: error: unknown group 'g'\n")


@pytest.mark.parametrize(("args", "message"), [
    (["--batch", "2"], "--batch needs --exec"),
    (["-G", "g", "--tail", "3"], "with --group the group decides partitions and start offsets"),
    (["-G", "g", "-o", "5"], "with --group, --offset takes beginning or end"),
    (["-G", "g", "-X", "fetch.min.bytes=1"], "unknown consumer property 'fetch.min.bytes'"),
    (["-G", "g", "-X", "partition.assignment.strategy=sticky"], "unknown assignor 'sticky'"),
    (["-X", "session.timeout.ms=10"], "--property needs --group"),
])
def test_bad_group_options_are_usage_errors(cli, args, message) -> None:
    cli("topics", "create", "t")
    r = cli("consume", "t", *args)
    assert r.exit_code == 2 and r.stderr.startswith("klog: error: ") and message in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_reset_needs_exactly_one_target(cli) -> None:
    r = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest")
    assert r.exit_code == 2 and "give exactly one of --to-earliest" in r.stderr


# -- only what reached stdout is committed ----------------------------------------------------------
def committed(data_dir: str, group: str = "g") -> dict[tuple[str, int], int]:
    with klog.open(data_dir) as store:
        return {tp: c.offset for tp, c in GroupsMeta(store.meta).committed(group).items()}


def consume_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "klog", "consume", "t", "-G", "g", *args]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", [[], ["-F", "%s\\n"], ["--format", "%o %s\\n"]])
def test_records_that_fail_to_reach_stdout_are_not_committed(cli, data_dir, fmt) -> None:
    cli("topics", "create", "t", "-p", "1")
    cli("produce", "t", input=b"".join(b"%d\n" % i for i in range(20)))
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    with open("/dev/full", "wb") as full:
        r = subprocess.run(consume_cmd(*fmt), stdout=full, stderr=subprocess.PIPE, env=env, timeout=60)
    assert r.returncode == 1 and b"No space left on device" in r.stderr
    assert committed(data_dir) == {}
    assert cli("consume", "t", "-G", "g").stdout == b"".join(b"%d\n" % i for i in range(20))  # a rerun has all


@pytest.mark.parametrize("fmt", [[], ["-F", "%o %s\\n"]])
def test_a_reader_that_goes_away_gets_no_more_committed_than_it_received(cli, data_dir, fmt) -> None:
    """`klog consume -G g | head -c 5000`: the values outsize the pipe, so a write is cut short when head
    exits (Python then returns a short count instead of raising); none of that write may be committed."""
    import shlex

    cli("topics", "create", "t", "-p", "1")
    with klog.open(data_dir) as store, store.producer() as p:
        for i in range(2000):
            p.send("t", b"%04d" % i + b"x" * 995)  # 1000 bytes and a newline per line
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    r = subprocess.run(["sh", "-c", shlex.join(consume_cmd(*fmt)) + " | head -c 5000"], capture_output=True,
                       env=env, timeout=120)
    assert r.returncode == 0 and len(r.stdout) == 5000
    assert b"Traceback" not in r.stderr
    received = r.stdout.count(b"\n") + 1  # whole lines and the one cut
    assert committed(data_dir).get(("t", 0), 0) <= received


def test_exec_with_grep_commits_the_records_it_filters_out(cli, data_dir, tmp_path) -> None:
    cli("topics", "create", "t", "-p", "1")
    cli("produce", "t", input=b"a0\nb1\na2\nb3\nb4\n")
    log = tmp_path / "ran.txt"
    r = cli("consume", "t", "-G", "g", "--grep", "^a", "--exec", f"cat >> {log}; echo >> {log}")
    assert r.exit_code == 0 and log.read_text().split() == ["a0", "a2"]
    assert committed(data_dir) == {("t", 0): 5}  # the trailing b3, b4 too: lag 0
    doc = json.loads(cli("groups", "describe", "g", "--json").out)
    assert [p["lag"] for p in doc["partitions"]] == [0]


@pytest.mark.parametrize(("batch", "expected"), [("1", {("t", 0): 2}), ("2", {("t", 0): 0})])
def test_exec_with_grep_commits_a_filtered_record_only_once_the_run_before_it_succeeded(cli, data_dir, batch,
                                                                                       expected) -> None:
    """a0 runs, b1 is filtered out, a2 fails: one by one, b1 is done (commit 2); in a batch of a0 and a2
    it sits between them, so neither it nor a0 is committed (0: where the member started, as Kafka's)."""
    cli("topics", "create", "t", "-p", "1")
    cli("produce", "t", input=b"a0\nb1\na2\nb3\n")
    r = cli("consume", "t", "-G", "g", "--grep", "^a", "--batch", batch, "--exec", "! grep -q a2")
    assert r.exit_code == 1 and "--exec command exited 1" in r.stderr
    assert committed(data_dir) == expected


# -- groups admin ---------------------------------------------------------------------------------
def test_delete_offsets_of_an_unknown_topic_or_partition_is_an_error(cli, data_dir) -> None:
    cli("topics", "create", "t", "-p", "2")
    cli("produce", "t", "-p", "0", input=b"1\n2\n")
    cli("produce", "t", "-p", "1", input=b"3\n")
    cli("consume", "t", "-G", "g")
    r = cli("groups", "delete-offsets", "g", "--topic", "nosuch")
    assert (r.exit_code, r.stderr) == (cli("consume", "nosuch").exit_code, "klog: error: unknown topic 'nosuch'\n")
    assert r.exit_code == 1
    r = cli("groups", "delete-offsets", "g", "--topic", "t:99")
    assert (r.exit_code, r.stderr) == (2, "klog: error: topic 't' has no partition 99 (it has 2)\n")
    assert committed(data_dir) == {("t", 0): 2, ("t", 1): 1}  # nothing deleted
    # a deleted topic's offsets stay in the group: they can still be deleted by name
    cli("topics", "delete", "t", "--yes")
    r = cli("groups", "delete-offsets", "g", "--topic", "t:0")
    assert r.out == "Deleted 1 committed offset(s) of group g\n"
    assert committed(data_dir) == {("t", 1): 1}


def test_a_dry_run_reset_names_the_live_members_execute_would_be_refused_for(cli, store) -> None:
    store.create_topic("t", partitions=1)
    with store.group_consumer("g", "t") as member:
        r = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest")
        assert r.exit_code == 0 and "dry run" in r.stderr
        note = r.stderr.splitlines()[-1]
        assert note.startswith(f"note: group g has 1 live member(s): {member.member_id} (pid {os.getpid()} on ")
        assert note.endswith("--execute will be refused until they stop")
    r = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest")
    assert "note:" not in r.stderr


def test_group_values_resume_inside_a_batch_and_print_null_as_an_empty_line(cli) -> None:
    """The values-only path of `consume --group`: a batch begun by an earlier run is cut at the
    committed offset, whole batches are decoded values-only; a null value is an empty line."""
    envelopes = [json.dumps({"value": None if i % 4 == 3 else str(i)}) for i in range(200)]
    cli("produce", "t", "--input", "json", input="\n".join(envelopes).encode() + b"\n")
    cli("produce", "t", input=b"".join(b"late%d\n" % i for i in range(100)))  # a second batch
    first = cli("consume", "t", "-G", "a", "-n", "5")
    rest = cli("consume", "t", "-G", "a")
    want = [b"" if i % 4 == 3 else b"%d" % i for i in range(200)] + [b"late%d" % i for i in range(100)]
    assert first.stdout.split(b"\n")[:-1] == want[:5]
    assert rest.stdout.split(b"\n")[:-1] == want[5:]


@pytest.mark.slow
def test_consume_group_exec_commits_after_each_success_and_a_failure_is_redone(klog_proc, data_dir, tmp_path):
    assert klog_proc("produce", "jobs", input=b"a\nb\nbad\nc\nd\n").returncode == 0
    out = tmp_path / "out"
    failing = f'v=$(cat); [ "$v" != bad ] && echo "$KLOG_OFFSET $v" >> {out}'
    first = klog_proc("consume", "jobs", "-G", "g", "--exec", failing)
    err = first.stderr.decode()
    assert first.returncode == 1 and "offset 2" in err and "Traceback" not in err
    assert out.read_text().splitlines() == ["0 a", "1 b"]
    (committed,) = json.loads(klog_proc("groups", "describe", "g", "--json").stdout)["partitions"]
    assert (committed["committed"], committed["lag"]) == (2, 3)  # the failed record is not committed

    batched = tmp_path / "batched"
    second = klog_proc("consume", "jobs", "-G", "g", "--batch", "2", "--exec",
                       f'echo "$KLOG_OFFSET:$KLOG_COUNT $(tr "\\n" ,)" >> {batched}')
    assert second.returncode == 0, second.stderr
    assert batched.read_text().splitlines() == ["2:2 bad,c,", "4:1 d,"]  # the failed record first
    third = klog_proc("consume", "jobs", "-G", "g", "--exec", f"cat >> {tmp_path / 'never'}")
    assert third.returncode == 0 and not (tmp_path / "never").exists()  # everything was committed


def test_a_group_started_at_the_end_resumes_there_after_reading_nothing(cli, data_dir) -> None:
    """`-o end` with nothing new commits where it started, as Kafka's consumer commits every assigned
    partition's position: the group's next run reads what came after, not the whole topic again."""
    cli("topics", "create", "t", "-p", "2")
    cli("produce", "t", input=b"1\n2\n3\n")
    r = cli("consume", "t", "-G", "g", "-o", "end")
    assert r.exit_code == 0 and r.out == ""
    cli("produce", "t", input=b"4\n5\n")
    r = cli("consume", "t", "-G", "g")
    assert sorted(r.out.split()) == ["4", "5"]
