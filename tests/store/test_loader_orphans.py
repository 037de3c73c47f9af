"""A writer's open removes index files whose log is gone, as Kafka's LogLoader does: retention
renames `.log` first, so a kill -9 between its renames leaves a base's indexes with no log."""

import os
import subprocess
import sys

import pytest


def klog(data_dir, *args, stdin=b""):
    return subprocess.run([sys.executable, "-m", "klog", *args, "--data-dir", str(data_dir)], input=stdin,
                          capture_output=True, timeout=60)


@pytest.mark.slow
def test_orphaned_indexes_are_removed_when_a_writer_opens(tmp_path):
    data = tmp_path / "d"
    assert klog(data, "topics", "create", "o", "-c", "segment.bytes=1024").returncode == 0
    for i in range(4):
        assert klog(data, "produce", "o", stdin=b"".join(b"%d-%d %s\n" % (i, j, b"x" * 40) for j in range(20))
                    ).returncode == 0
    folder = next(p for p in data.rglob("o-0") if p.is_dir())
    first = "0" * 20
    assert (folder / f"{first}.index").exists()
    os.rename(folder / f"{first}.log", folder / f"{first}.log.deleted")  # killed after retention's first rename
    r = klog(data, "produce", "o", stdin=b"after\n")
    assert r.returncode == 0, r.stderr
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith(first))
    assert left == [f"{first}.log.deleted"]  # its indexes went; the .deleted log waits out its delay
    v = klog(data, "verify")
    assert v.returncode == 0, v.stdout + v.stderr
