"""`klog dirs add` refuses a folder that overlaps the store: its own data directory or a folder
holding it, a folder inside or holding a log directory, another store's root or log directory, a
Kafka log directory. Each is one line, exit 2, and nothing is written there (it wrote its identity,
meta.properties and checkpoint files into another store's root, and a later `dirs remove` moved
partitions out from under the nested directory)."""

from __future__ import annotations

import os

import pytest


def _store(cli, path):
    assert cli("topics", "create", "t", "-p", "2", "--data-dir", path).exit_code == 0
    assert cli("produce", "t", "--data-dir", path, input=b"a\nb\nc\n").exit_code == 0


def _a_partition_folder(data):
    logs = os.path.join(data, "logs")
    return os.path.join(logs, min(n for n in os.listdir(logs) if n.startswith("t-")))


@pytest.mark.parametrize("target", ["root", "parent", "partition", "meta", "other_root", "other_logs", "kafka"])
def test_dirs_add_refuses_overlapping_folders(cli, tmp_path, target):
    data = str(tmp_path / "store")
    other = str(tmp_path / "other")
    _store(cli, data)
    _store(cli, other)
    kafka = tmp_path / "kafka-logs"
    kafka.mkdir()
    (kafka / "meta.properties").write_text("version=1\nnode.id=1\n")
    path = {"root": data, "parent": str(tmp_path), "partition": _a_partition_folder(data),
            "meta": os.path.join(data, "meta"), "other_root": other, "other_logs": os.path.join(other, "logs"),
            "kafka": str(kafka)}[target]
    before = sorted(os.listdir(path))
    r = cli("dirs", "add", path, "--data-dir", data)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and path in r.stderr and "Traceback" not in r.stderr
    assert sorted(os.listdir(path)) == before  # nothing written into it
    assert len(cli("dirs", "list", "--json", "--data-dir", data).stdout.splitlines()) == 1
    assert sorted(cli("consume", "t", "--data-dir", data).out.split()) == ["a", "b", "c"]


def test_dirs_add_still_takes_a_new_folder_beside_the_store(cli, tmp_path):
    data = str(tmp_path / "store")
    _store(cli, data)
    for path in (str(tmp_path / "disk2"), os.path.join(data, "logs2")):
        r = cli("dirs", "add", path, "--data-dir", data)
        assert r.exit_code == 0, r.stderr
    assert len(cli("dirs", "list", "--json", "--data-dir", data).stdout.splitlines()) == 3
