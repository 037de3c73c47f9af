"""Local files: a new store (and a log directory added elsewhere) is owner-only, so segments and
the LMDB metadata holding SASL credentials are out of other local users' reach; KLOG_DIR_MODE
shares it with a group; a bad value is one line, exit 2."""

from __future__ import annotations

import os
import stat

import klog


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_store_and_log_dirs_are_owner_only(tmp_path, monkeypatch):
    monkeypatch.delenv("KLOG_DIR_MODE", raising=False)
    data = str(tmp_path / "data")
    with klog.open(data) as store:
        store.create_topic("t")
        assert _mode(data) == 0o700
        assert _mode(store.data_dir.log_dir_path(0)) == 0o700
        other = str(tmp_path / "disk2" / "logs")
        store.data_dir.add_log_dir(other)
        assert _mode(other) == 0o700


def test_shared_group_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("KLOG_DIR_MODE", "2750")
    data = str(tmp_path / "data")
    with klog.open(data):
        assert _mode(data) == 0o2750


def test_existing_directory_keeps_its_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("KLOG_DIR_MODE", raising=False)
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    with klog.open(str(data)):
        assert _mode(str(data)) == 0o755  # an operator's choice is not overridden


def test_bad_dir_mode_is_one_line(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("KLOG_DIR_MODE", "777")
    r = cli("topics", "create", "t", "--data-dir", str(tmp_path / "fresh"))
    assert r.exit_code == 1 and "KLOG_DIR_MODE='777'" in r.stderr and r.stderr.count("\n") == 1
