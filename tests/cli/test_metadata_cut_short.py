"""A `meta/data.mdb` cut short (a copy that stopped early, a truncated backup) used to kill every
command with SIGBUS: LMDB maps the file and reads the pages its meta page names, past the end of
the file. Every command now says in one line that the database is cut short, and changes nothing."""

from __future__ import annotations

import os

import pytest


@pytest.mark.parametrize("keep_pages", [1, 2, -1])
def test_a_cut_metadata_database_is_one_line_not_a_bus_error(klog_proc, data_dir, keep_pages):
    assert klog_proc("produce", "t", input=b"a\nb\n").returncode == 0
    data_file = os.path.join(data_dir, "meta", "data.mdb")
    size = os.path.getsize(data_file)
    assert size > 3 * 4096, size
    cut = 4096 * keep_pages if keep_pages > 0 else size - 4096
    os.truncate(data_file, cut)
    for args in (("topics", "list"), ("consume", "t"), ("verify",), ("produce", "t")):
        r = klog_proc(*args, input=b"c\n")
        err = r.stderr.decode()
        assert r.returncode == 1, (args, r.returncode, err)
        [line] = err.strip().splitlines()
        assert "is cut short" in line and "Traceback" not in err, line
    assert os.path.getsize(data_file) == cut  # nothing written over it
