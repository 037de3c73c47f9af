"""The store under hostile conditions (issue 12): read-only media, lost metadata, unsafe paths,
shared-group umasks, deletes that cannot finish. Real files and processes; read-only mounts are
made in a private mount namespace (unshare -m), since chmod does not stop root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.klog_processes import require_mount_namespace

IN_NAMESPACE = r"""
import json, subprocess, sys
data_dir, target, commands = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
subprocess.run(["mount", "--bind", target, target], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
out = []
for args, stdin in commands:
    r = subprocess.run([sys.executable, "-m", "klog", *args], input=stdin.encode(), capture_output=True,
                       env={"KLOG_DATA_DIR": data_dir, "PYTHONPATH": sys.argv[4], "PATH": "/usr/bin:/bin"})
    out.append([r.returncode, r.stdout.decode(), r.stderr.decode()])
print(json.dumps(out))
"""


def _read_only_run(tmp_path, data_dir: str, target: str, commands: list[tuple[list[str], str]]) -> list:
    """Run klog commands with `target` (the store or one of its folders) mounted read-only."""
    require_mount_namespace()
    script = tmp_path / "ns.py"
    script.write_text(IN_NAMESPACE)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, str(script), data_dir, target,
                        json.dumps(commands), REPO], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def _tree(path: str) -> dict[str, tuple[int, int]]:
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            out[os.path.relpath(os.path.join(root, f), path)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.slow
def test_reads_work_on_a_read_only_store_and_writes_say_why_not(cli, klog_proc, data_dir, tmp_path):
    assert cli("produce", "t", input=b"a\nb\nc\n").exit_code == 0
    results = _read_only_run(tmp_path, data_dir, data_dir, [
        (["consume", "t"], ""), (["topics", "list", "--json"], ""), (["topics", "describe", "t"], ""),
        (["verify"], ""), (["offsets", "t"], ""), (["produce", "t"], "d\n")])
    consume, listing, describe, verify, offsets, produce = results
    assert consume[:2] == [0, "a\nb\nc\n"], consume
    assert listing[0] == 0 and json.loads(listing[1])["offsets"] == 3, listing
    assert describe[0] == 0 and verify[0] == 0 and offsets[0] == 0, (describe, verify, offsets)
    assert produce[0] == 1 and produce[2] == f"klog: error: data directory {data_dir} is not writable\n", produce


@pytest.mark.slow
def test_read_only_commands_change_nothing(cli, klog_proc, data_dir):
    assert cli("produce", "t", input=b"a\nb\n").exit_code == 0
    assert klog_proc("topics", "create", "never-written").returncode == 0
    os.unlink(os.path.join(data_dir, "locks", "t-0.lock"))
    lock_mdb = os.path.join("meta", "lock.mdb")  # LMDB's reader table: shared memory, not data
    before = _tree(data_dir)
    for args in (["consume", "t"], ["consume", "never-written"], ["topics", "list"], ["topics", "describe", "t"],
                 ["verify"], ["offsets", "t"], ["dump", "t"]):
        assert klog_proc(*args).returncode == 0, args
    after = _tree(data_dir)
    before.pop(lock_mdb), after.pop(lock_mdb)
    assert after == before


def test_a_lost_metadata_database_is_an_error_for_readers_not_an_empty_store(cli, klog_proc, data_dir):
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    shutil.rmtree(os.path.join(data_dir, "meta"))
    r = klog_proc("topics", "list")
    assert r.returncode == 1 and b"no metadata database" in r.stderr and r.stderr.count(b"\n") == 1
    assert not os.path.exists(os.path.join(data_dir, "meta")), "a read re-created the metadata"


@pytest.mark.slow
def test_an_emptied_data_mdb_fails_verify_and_produce_never_recreates_the_topic_over_old_records(cli, klog_proc,
                                                                                                data_dir):
    assert cli("produce", "t", input=b"old1\nold2\n").exit_code == 0
    open(os.path.join(data_dir, "meta", "data.mdb"), "wb").close()
    for args in (["verify"], ["produce", "t"], ["topics", "list"]):
        r = klog_proc(*args, input=b"new\n")
        assert r.returncode == 1 and b"is empty (lost or truncated)" in r.stderr, (args, r.stderr)
        assert r.stderr.count(b"\n") == 1
    # a new metadata database (meta/ moved away): verify names the orphaned folder, and produce
    # does not create the topic over it
    shutil.rmtree(os.path.join(data_dir, "meta"))
    assert klog_proc("topics", "create", "other").returncode == 0
    r = klog_proc("verify")
    assert r.returncode == 1 and b"a partition folder no topic of this store owns" in r.stdout
    r = klog_proc("produce", "t", input=b"new\n")
    assert r.returncode == 1 and b"already holds a partition no metadata names" in r.stderr
    assert r.stderr.count(b"\n") == 1


def test_garbage_in_data_mdb_is_one_line(cli, klog_proc, data_dir):
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    path = os.path.join(data_dir, "meta", "data.mdb")
    with open(path, "r+b") as f:
        f.write(os.urandom(8192))
    for args in (["topics", "list"], ["produce", "t"], ["verify"]):
        r = klog_proc(*args, input=b"x\n")
        assert r.returncode == 1, (args, r)
        assert r.stderr.count(b"\n") == 1 and b"Traceback" not in r.stderr, (args, r.stderr)


def test_delete_on_a_read_only_log_directory_deletes_nothing_and_says_so(cli, klog_proc, data_dir, tmp_path):
    assert cli("produce", "t", input=b"a\nb\n").exit_code == 0
    results = _read_only_run(tmp_path, data_dir, os.path.join(data_dir, "logs"), [
        (["topics", "delete", "t", "--yes"], ""), (["consume", "t"], "")])
    delete, consume = results
    assert delete[0] == 1 and "nothing was deleted" in delete[2] and "Read-only file system" in delete[2], delete
    assert consume[:2] == [0, "a\nb\n"], consume


@pytest.mark.slow
def test_a_delete_that_cannot_remove_everything_says_so_and_verify_repair_finishes_it(cli, klog_proc, data_dir,
                                                                                    tmp_path):
    """The folders are renamed aside first; what cannot be removed afterwards (a read-only mount
    inside one) is named, never read as the topic again, reported by verify, and removed by
    verify --repair once it can be."""
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    stuck = os.path.join(data_dir, "logs", "t-0", "stuck")  # a read-only mount inside the folder
    os.makedirs(stuck)
    open(os.path.join(stuck, "file"), "wb").close()
    results = _read_only_run(tmp_path, data_dir, stuck, [
        (["topics", "delete", "t", "--yes"], ""), (["topics", "list", "--json"], ""), (["verify"], "")])
    delete, listing, verify = results
    assert delete[0] == 1 and "deleted topic 't', but could not remove" in delete[2], delete
    assert listing[:2] == [0, ""], listing
    assert verify[0] == 1 and "left over from a topic delete" in verify[1], verify
    r = klog_proc("verify", "--repair")
    assert r.returncode == 0 and b"repaired: removed" in r.stdout, r
    assert klog_proc("verify").returncode == 0
    assert klog_proc("produce", "t", input=b"new\n").returncode == 0
    assert klog_proc("consume", "t").stdout == b"new\n"
    # and once it can, it really deletes: re-creating the topic brings nothing back
    assert klog_proc("topics", "delete", "t", "--yes").returncode == 0
    assert klog_proc("produce", "t", input=b"new\n").returncode == 0
    assert klog_proc("consume", "t").stdout == b"new\n"


@pytest.mark.parametrize(("setting", "value"), [("log_dirs", "nope"), ("log_dirs", [{"id": "0", "path": "logs"}]),
                                                ("defaults", {"num.partitions": "many"}), ("defaults", [])])
def test_wrong_types_in_klog_json_are_one_line(cli, klog_proc, data_dir, setting, value):
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    path = os.path.join(data_dir, "klog.json")
    with open(path) as f:
        doc = json.load(f)
    doc[setting] = value
    with open(path, "w") as f:
        json.dump(doc, f)
    r = klog_proc("consume", "t")
    assert r.returncode == 1 and r.stderr.startswith(b"klog: error: " + path.encode()), r.stderr
    assert r.stderr.count(b"\n") == 1


def test_an_empty_data_dir_path_is_refused(klog_proc, tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO, "HOME": str(tmp_path)}
    for extra_env, args in (({"KLOG_DATA_DIR": ""}, ["topics", "list"]),
                            ({}, ["topics", "list", "--data-dir", ""])):
        run_env = {k: v for k, v in env.items() if k != "KLOG_DATA_DIR"} | extra_env
        r = subprocess.run([sys.executable, "-m", "klog", *args], capture_output=True, env=run_env, timeout=60)
        assert r.returncode == 2 and b"empty" in r.stderr, (args, r.stderr)
    assert not os.path.exists(tmp_path / ".local"), "the default store was used"


@pytest.mark.parametrize("planted", ["00000000000000000000.log", "00000000000000000000.index",
                                     "00000000000000000000.timeindex", "klog-replica.state"])
def test_a_symlink_planted_in_a_partition_folder_is_never_written_through(cli, klog_proc, data_dir, tmp_path, planted):
    assert cli("topics", "create", "t").exit_code == 0
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n" * 100)
    folder = os.path.join(data_dir, "logs", "t-0")
    os.makedirs(folder)
    os.symlink(victim, os.path.join(folder, planted))
    r = klog_proc("produce", "t", input=b"x\n")
    assert r.returncode == 1 and b"is a symbolic link" in r.stderr and r.stderr.count(b"\n") == 1, r.stderr
    assert victim.read_bytes() == b"precious\n" * 100


def test_a_symlinked_partition_folder_is_refused(cli, klog_proc, data_dir, tmp_path):
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    folder = os.path.join(data_dir, "logs", "t-0")
    elsewhere = str(tmp_path / "elsewhere")
    shutil.move(folder, elsewhere)
    os.symlink(elsewhere, folder)
    before = _tree(elsewhere)
    for args in (["consume", "t"], ["produce", "t"]):
        r = klog_proc(*args, input=b"b\n")
        assert r.returncode == 1 and b"is a symbolic link" in r.stderr and r.stderr.count(b"\n") == 1, r.stderr
    r = klog_proc("verify")
    assert r.returncode == 1 and b"symbolic link" in r.stdout + r.stderr
    assert _tree(elsewhere) == before


def test_files_honour_the_umask_for_a_group_shared_store(tmp_path):
    """Guarantee 11: under umask 002 every file klog creates is group-writable (0664), so a
    group-shared store works for every member; under 022 none is."""
    for umask, group_write in ((0o002, True), (0o022, False)):
        data_dir = str(tmp_path / f"data{umask:o}")
        env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
        r = subprocess.run([sys.executable, "-m", "klog", "produce", "t"], input=b"a\nb\n", capture_output=True,
                           env=env, timeout=60, preexec_fn=lambda u=umask: os.umask(u))
        assert r.returncode == 0, r.stderr
        modes = {}
        for root, _dirs, files in os.walk(data_dir):
            for f in files:
                modes[os.path.relpath(os.path.join(root, f), data_dir)] = os.stat(os.path.join(root, f)).st_mode
        assert {"logs/t-0/00000000000000000000.log", "state/t-0.state", "locks/t-0.lock",
                "meta/data.mdb"} <= set(modes)
        wrong = {name: oct(m & 0o777) for name, m in modes.items() if bool(m & 0o020) != group_write}
        assert not wrong, (umask, wrong)


def test_a_255_character_group_on_a_249_character_topic_commits_and_resumes(klog_proc):
    """LMDB keys stop at 511 bytes; group + topic + partition did not fit (BadValsizeError)."""
    topic, group = "t" * 249, "g" * 255
    assert klog_proc("produce", topic, input=b"1\n2\n").returncode == 0
    r = klog_proc("consume", topic, "--group", group)
    assert r.returncode == 0 and r.stdout == b"1\n2\n", r.stderr
    assert klog_proc("produce", topic, input=b"3\n").returncode == 0
    r = klog_proc("consume", topic, "--group", group)
    assert r.returncode == 0 and r.stdout == b"3\n", r.stderr  # resumed at its committed offset


def test_errors_about_names_with_control_characters_stay_on_one_line(klog_proc):
    for name in ("a\nb", "a\x1b]0;TITLE\x07"):
        r = klog_proc("topics", "create", name)
        assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"\x1b" not in r.stderr, r.stderr


def test_a_segment_name_beyond_int64_is_not_a_segment(cli, klog_proc, data_dir):
    assert cli("produce", "t", input=b"1\n").exit_code == 0
    open(os.path.join(data_dir, "logs", "t-0", "99999999999999999999.log"), "wb").close()
    for args in (["produce", "t"], ["consume", "t"]):
        r = klog_proc(*args, input=b"2\n")
        assert r.returncode == 0 and b"Traceback" not in r.stderr, (args, r.stderr)
    assert klog_proc("consume", "t").stdout == b"1\n2\n"
    # but verify says so: records in such a file are not part of the log (before: "ok")
    r = klog_proc("verify")
    assert r.returncode == 1 and b"99999999999999999999.log: not read as a segment" in r.stdout, r.stdout


def test_verify_reports_a_symlinked_index_under_its_replica(cli, klog_proc, data_dir, tmp_path):
    assert cli("produce", "t", input=b"1\n").exit_code == 0
    index = os.path.join(data_dir, "logs", "t-0", "00000000000000000000.index")
    shutil.move(index, tmp_path / "elsewhere.index")
    os.symlink(tmp_path / "elsewhere.index", index)
    for args in (["verify"], ["verify", "--repair"]):
        r = klog_proc(*args)
        assert r.returncode == 1 and b"Traceback" not in r.stderr, (args, r.stderr)
        assert r.stdout.startswith(b"t-0 replica 0: DAMAGED") and b"index is a symbolic link" in r.stdout, r.stdout
        assert b"replica None" not in r.stdout  # before: verify stopped at the first such file, or said this


@pytest.mark.slow
def test_a_stray_empty_segment_does_not_move_the_log_end(cli, klog_proc, data_dir):
    assert cli("produce", "t", input=b"1\n2\n3\n").exit_code == 0
    open(os.path.join(data_dir, "logs", "t-0", "00000000001000000000.log"), "wb").close()
    r = klog_proc("verify")
    assert r.returncode == 1 and b"an empty segment at offset 1000000000" in r.stdout
    assert klog_proc("produce", "t", input=b"4\n").returncode == 0  # at offset 3, not 1000000000
    assert klog_proc("consume", "t").stdout == b"1\n2\n3\n4\n"
    assert json.loads(klog_proc("offsets", "t", "--json").stdout)["latest"] == 4
    assert klog_proc("verify").returncode == 0


@pytest.mark.slow
def test_a_flipped_byte_found_after_a_reboot_is_a_loud_loss_with_the_cut_bytes_kept(klog_proc, data_dir):
    """The next produce after a reboot cuts committed records at a flipped byte in the last batch
    (Kafka's recovery of a torn tail: nothing valid follows it): it exits 1, keeps the cut bytes in
    a .corrupt file, and verify reports it."""
    import struct
    import zlib

    for _ in range(5):
        assert klog_proc("produce", "t", input=b"".join(b"%d\n" % i for i in range(100))).returncode == 0
    folder = os.path.join(data_dir, "logs", "t-0")
    log = os.path.join(folder, "00000000000000000000.log")
    with open(log, "rb") as f:
        data = bytearray(f.read())
    pos = 0
    for _ in range(4):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    data[pos + 70] ^= 0xFF  # inside the last batch's records: a CRC mismatch at offset 400
    cut = bytes(data[pos:])
    with open(log, "wb") as f:
        f.write(data)
    state = os.path.join(folder, "klog-replica.state")  # as after a reboot: another boot id
    with open(state, "rb") as f:
        raw = bytearray(f.read())
    raw[:16] = b"\x01" * 16
    raw[-4:] = zlib.crc32(bytes(raw[:-4])).to_bytes(4, "big")
    with open(state, "wb") as f:
        f.write(raw)
    r = klog_proc("produce", "t", input=b"x\n")
    assert r.returncode == 1, r.stderr
    assert b"data loss: committed records 400..499 of t-0 are gone" in r.stderr
    # the rule: nothing is written at the lost offsets until the loss is acknowledged, so a script
    # that retries a produce that exited 1 writes nothing twice (before: x was written, exit 1)
    assert b"t-0 takes no writes" in r.stderr and b"klog verify --repair" in r.stderr
    assert klog_proc("produce", "t", input=b"x\n").returncode == 1  # the retry: refused again
    assert klog_proc("consume", "t").stdout == b"".join(b"%d\n" % i for i in range(100)) * 4
    kept = os.path.join(folder, f"00000000000000000000.log.{pos}.corrupt")
    with open(kept, "rb") as f:
        assert f.read() == cut
    r = klog_proc("verify")
    assert r.returncode == 1 and b".corrupt: %d bytes of acknowledged records" % len(cut) in r.stdout
    assert b"takes no writes until --repair acknowledges the loss" in r.stdout
    os.unlink(kept)
    r = klog_proc("verify", "--repair")
    assert r.returncode == 0 and b"the loss is acknowledged; writes go on from offset 400" in r.stdout, r.stdout
    assert klog_proc("verify").returncode == 0
    r = klog_proc("produce", "t", input=b"x\n")
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert klog_proc("consume", "t", "-o", "400").stdout == b"x\n"


def test_long_lines_and_delimiters_across_read_chunks_are_split_exactly(klog_proc, tmp_path):
    """Lines are gathered chunk by chunk (no quadratic `rest + chunk`): a 5 MiB line and a
    two-byte delimiter split by the 1 MiB read boundary still give exactly the input's records."""
    chunk = 1 << 20
    records = [b"a" * (chunk - 1), b"b" * (5 * chunk), b"c", b"d" * (chunk - 3), b"e"]
    data = b"|;".join(records) + b"|;"
    path = tmp_path / "input"
    path.write_bytes(data)
    assert klog_proc("topics", "create", "t", "-c", "max.message.bytes=16000000").returncode == 0
    r = klog_proc("produce", "t", "-D", "|;", str(path))
    assert r.returncode == 0, r.stderr
    out = klog_proc("consume", "t", "--json").stdout.splitlines()
    assert [json.loads(line)["value"] for line in out] == [x.decode() for x in records]


@pytest.mark.slow
def test_a_user_without_write_permission_can_read_but_not_write(tmp_path):
    """Guarantee 7 with a real non-root user (setpriv): reads work, writes say why they cannot."""
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to run as another user")
    base = tempfile.mkdtemp(prefix="klog-shared-")
    try:
        os.chmod(base, 0o755)
        data_dir = os.path.join(base, "data")
        # a store shared read-only with the group (KLOG_DIR_MODE), read by a user of that group
        env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO, "KLOG_DIR_MODE": "2750"}
        run = lambda args, stdin=b"", user=(): subprocess.run(  # noqa: E731
            [*user, sys.executable, "-m", "klog", *args], input=stdin, capture_output=True, env=env, timeout=60,
            preexec_fn=lambda: os.umask(0o022))
        assert run(["produce", "t"], b"a\nb\n").returncode == 0
        nobody = ["setpriv", "--reuid=65534", f"--regid={os.getgid()}", "--clear-groups"]
        if run(["--version"], user=nobody).returncode != 0:
            pytest.skip("the other user cannot run this checkout's python")
        r = run(["consume", "t"], user=nobody)
        assert (r.returncode, r.stdout) == (0, b"a\nb\n"), r.stderr
        for args in (["topics", "list"], ["verify"], ["topics", "describe", "t"]):
            r = run(args, user=nobody)
            assert r.returncode == 0, (args, r.stderr)
        r = run(["produce", "t"], b"c\n", user=nobody)
        assert r.returncode == 1 and r.stderr == f"klog: error: data directory {data_dir} is not writable\n".encode()
    finally:
        shutil.rmtree(base)
