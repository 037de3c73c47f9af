"""Damaged data with no intact replica has a way out (issue 25): the reader's error names the next
command; `consume --skip-damaged` prints everything readable and names what it skipped;
`verify --repair --discard-damaged` moves the damaged batch aside (the rest stays, an offset gap in
its place), saying which offsets were lost; after delete-records past the damage, verify is content."""

from __future__ import annotations

import glob
import os

import klog
from tests.cli.test_cli import assert_one_line_error


def written(cli, batches: int, segment_bytes: int = 200) -> None:
    """Topic t: one batch of one record (v0, v1, ...) per produce, a few batches per segment."""
    assert cli("topics", "create", "t", "-c", f"segment.bytes={segment_bytes}").exit_code == 0
    for i in range(batches):
        assert cli("produce", "t", input=b"v%d\n" % i).exit_code == 0


def damage(data_dir: str, segment: int = 0, at: int = 30) -> str:
    """Flip a byte of a batch the CRC covers (`at`: a position in the segment at `segment`)."""
    path = sorted(glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log")))[segment]
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    return path


def segment_bases(data_dir: str) -> list[int]:
    return sorted(int(os.path.basename(p)[:-4]) for p in glob.glob(os.path.join(data_dir, "logs", "t-0", "*.log")))


def test_a_reader_meets_damage_and_is_told_what_to_run(cli, data_dir):
    written(cli, 8)
    damage(data_dir)
    r = cli("consume", "t")
    assert_one_line_error(r, 1, "CRC mismatch", "klog consume t --skip-damaged",
                          "klog verify t --repair --discard-damaged")
    r = cli("verify", "t", "--repair")
    assert r.exit_code == 1 and "not repaired" in r.out and "--discard-damaged" in r.out, r


def test_skip_damaged_prints_everything_readable_and_names_the_skipped_range(cli, data_dir):
    written(cli, 8)
    bases = segment_bases(data_dir)
    assert len(bases) >= 3 and bases[1] > 1, bases  # the damage is in the first segment, which holds more
    damage(data_dir)
    r = cli("consume", "t", "--skip-damaged")
    assert r.exit_code == 1
    # only the damaged batch is skipped: the rest of its segment is read (its length field is intact)
    assert r.stdout == b"".join(b"v%d\n" % i for i in range(1, 8))
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("klog: skipped t-0 offsets 0..0: damaged (CRC mismatch"), line
    assert cli("consume", "t", "--skip-damaged", "--group", "g").exit_code == 2


def test_discard_damaged_asks_then_moves_the_damage_aside_and_says_what_was_lost(cli, data_dir):
    written(cli, 8)
    bases = segment_bases(data_dir)
    with open(damage(data_dir), "rb") as f:
        damaged_bytes = f.read()
    assert bases[1] > 1, bases
    r = cli("verify", "t", "--repair", "--discard-damaged", input=b"")
    assert_one_line_error(r, 2, "t-0 offsets 0..0", "--yes")
    assert cli("consume", "t").exit_code == 1  # nothing changed without the consent
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    assert r.exit_code == 0, r
    assert "t-0: discarded offsets 0..0 (the damaged batch); the records before and after it stay" in r.out
    [kept] = glob.glob(os.path.join(data_dir, "logs", "t-0", "*.discarded.corrupt"))
    with open(kept, "rb") as f:
        kept_bytes = f.read()
    assert kept_bytes and damaged_bytes.startswith(kept_bytes)  # the damaged batch, kept for inspection
    r = cli("consume", "t")  # the rest of the damaged segment is kept
    assert (r.exit_code, r.stdout) == (0, b"".join(b"v%d\n" % i for i in range(1, 8)))
    r = cli("verify", "t")
    assert (r.exit_code, r.out.strip()) == (0, "t-0 replica 0: ok"), r


def test_discarding_damage_in_the_only_segment_keeps_offsets_going_up(cli, data_dir):
    written(cli, 4, segment_bytes=1_000_000)
    damage(data_dir, at=100)  # the second batch of the one (active) segment
    r = cli("verify", "t", "--repair", "--discard-damaged", "--yes")
    # only the damaged batch goes: the one before it and the two after it stay, the log start too
    assert r.exit_code == 0 and "discarded offsets 1..1 (the damaged batch)" in r.out, r
    assert cli("produce", "t", input=b"after\n").exit_code == 0
    with klog.open(data_dir) as s:
        assert [(x.offset, x.value) for x in s.consumer("t")] == [(0, b"v0"), (2, b"v2"), (3, b"v3"), (4, b"after")]
        assert s.partition("t", 0).log_start_offset() == 0
    assert cli("verify", "t").exit_code == 0


def test_after_delete_records_past_the_damage_verify_is_content(cli, data_dir):
    written(cli, 4, segment_bytes=1_000_000)
    damage(data_dir, at=100)
    assert cli("verify", "t").exit_code == 1
    assert cli("topics", "delete-records", "t", "--before", "4").exit_code == 0
    r = cli("verify", "t")
    assert (r.exit_code, r.out.strip()) == (0, "t-0 replica 0: ok"), r
    assert cli("consume", "t").stdout == b""


def test_every_reader_of_damaged_data_names_the_way_out(cli, data_dir):
    written(cli, 8)
    damage(data_dir)
    assert_one_line_error(cli("replay", "t", "--to", "copy"), 1, "CRC mismatch", "klog verify --repair")


def test_discard_damaged_asks_on_a_terminal(cli, data_dir):
    import pty
    import subprocess
    import sys

    from tests.conftest import REPO

    written(cli, 8)
    damage(data_dir)
    env = {**os.environ, "KLOG_DATA_DIR": data_dir, "PYTHONPATH": REPO}
    for answer, code in ((b"n\n", 1), (b"y\n", 0)):
        main, child = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "klog", "verify", "t", "--repair", "--discard-damaged"],
                                stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        os.write(main, answer)
        out, err = proc.communicate(timeout=60)
        os.close(child)
        os.close(main)
        assert proc.returncode == code, (out, err)
    assert b"discarded offsets 0.." in out
    assert cli("consume", "t").exit_code == 0
