"""consume --json's Record-free path (envelope.json_lines) writes exactly record_json_line's bytes."""

import random
import re
import subprocess
import sys

import pytest

from klog.client.envelope import json_lines, record_json_line
from klog.client.records import Record


def test_json_lines_match_the_record_envelope_byte_for_byte() -> None:
    rng = random.Random(7)
    pieces = [None, b"", b"plain", "ünï \"q\" \\ \n\t".encode(), b"\xff\xfe\x00", b"\x1b[31m"]
    for ts_type in (0, 1):
        records = [(i, 1_700_000_000_000 + i, rng.choice(pieces), rng.choice(pieces),
                    [(rng.choice(["h", "ü", "", 'q"']), rng.choice(pieces)) for _ in range(rng.choice((0, 0, 1, 3)))])
                   for i in range(300)]
        want = b"".join(record_json_line(Record('t"ü', 3, o, ts, ts_type, k, v, h)) for o, ts, k, v, h in records)
        assert json_lines('t"ü', 3, ts_type, records) == want


@pytest.mark.slow
def test_consume_json_of_one_partition_equals_the_merged_path(tmp_path) -> None:
    """The same records through the one-partition fast path and through a two-partition read
    (record by record) give the same envelope lines."""
    def klog(*args, stdin=b""):
        r = subprocess.run([sys.executable, "-m", "klog", *args, "--data-dir", str(tmp_path)], input=stdin,
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    klog("topics", "create", "one")
    klog("topics", "create", "two", "-p", "2")
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(2000)) + b":\n" + b"k:\n"
    klog("produce", "one", "-K:", stdin=lines)
    klog("produce", "two", "-K:", "-p", "0", stdin=lines)
    fast = klog("consume", "one", "--json").splitlines()
    slow = [line for line in klog("consume", "two", "--json").splitlines() if b'"partition": 0' in line]
    assert len(fast) == 2002
    def same(line: bytes) -> bytes:  # the topic's name and the produce time differ
        return re.sub(rb'"timestamp": \d+', b"", re.sub(rb'"topic": "\w+"', b"", line))

    assert [same(f) for f in fast] == [same(s) for s in slow]
