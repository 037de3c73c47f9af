"""A flipped byte in a log directory's `klog-logdir.id` that leaves no UTF-8 (0xE1 in the id) made
every writer fail with a UnicodeDecodeError traceback; it is another id now, as any other flip is:
the directory reads as replaced, and the writer says so in one line each."""

from __future__ import annotations

import glob
import os


def test_a_non_utf8_byte_in_the_log_dir_id_is_no_traceback(cli, data_dir):
    assert cli("produce", "t", input=b"a\n").exit_code == 0
    [id_file] = glob.glob(os.path.join(data_dir, "logs", "klog-logdir.id"))
    with open(id_file, "r+b") as f:
        f.seek(5)
        f.write(b"\xe1")
    r = cli("produce", "t", input=b"b\n")
    assert r.exit_code == 1 and "Traceback" not in r.stderr, r
    assert "log directory 0 was replaced" in r.stderr, r
    assert cli("consume", "t").stdout == b"a\n"
