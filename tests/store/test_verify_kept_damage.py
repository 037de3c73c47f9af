"""verify of a segment holding damage recovery kept (a damaged batch below the high watermark that
a provably valid batch follows, store/resume.py): the index entries past the damage point at the
valid batches after it and are checked against them, so verify names only the damage; an entry
past the damage that is wrong is still reported."""

from __future__ import annotations

import struct

import pytest

from tests.store.test_recovery import active_log_path, reboot
from tests.store.test_recovery_keeps_damage import _flip, _written

pytestmark = pytest.mark.slow


def _kept_damage(data_dir: str, monkeypatch) -> tuple[str, int]:
    import klog

    folder = _written(data_dir)
    path = active_log_path(folder)
    position, _ = _flip(path, 5)
    reboot(monkeypatch)
    with klog.open(data_dir) as store, store.producer() as p:  # recovery keeps the damaged batch
        p.send("one", b"after", partition=0)
    return path, position


def test_verify_names_only_the_kept_damage(data_dir, monkeypatch, cli):
    path, position = _kept_damage(data_dir, monkeypatch)
    with open(path[:-len(".log")] + ".index", "rb") as f:
        entries = [struct.unpack(">ii", f.read(8)) for _ in range(3)]
    assert entries[-1][1] > position  # (entries past the damage exist)
    r = cli("verify", "one")
    assert r.exit_code == 1 and "DAMAGED" in r.out and f"position {position}" in r.out, r
    assert "index problem" not in r.out, r.out


def test_a_wrong_index_entry_past_the_kept_damage_is_still_reported(data_dir, monkeypatch, cli):
    path, position = _kept_damage(data_dir, monkeypatch)
    index = path[:-len(".log")] + ".index"
    with open(index, "rb") as f:
        data = bytearray(f.read())
    n = next(i for i in range(len(data) // 8) if struct.unpack_from(">ii", data, 8 * i)[1] > position)
    rel, pos = struct.unpack_from(">ii", data, 8 * n)
    struct.pack_into(">ii", data, 8 * n, rel, pos + 1)  # one byte off a batch's start
    with open(index, "wb") as f:
        f.write(data)
    r = cli("verify", "one")
    assert r.exit_code == 1 and "DAMAGED" in r.out, r
    assert f"offset index entry {n} ({rel}, {pos + 1})" in r.out, r.out


def test_a_wrong_time_index_entry_past_the_kept_damage_is_still_reported(data_dir, monkeypatch, cli):
    path, position = _kept_damage(data_dir, monkeypatch)
    index = path[:-len(".log")] + ".timeindex"
    with open(index, "rb") as f:
        data = bytearray(f.read())
    last = max(i for i in range(len(data) // 12) if struct.unpack_from(">qi", data, 12 * i) != (0, 0))
    ts, rel = struct.unpack_from(">qi", data, 12 * last)
    struct.pack_into(">qi", data, 12 * last, ts + 1, rel)  # a timestamp no batch has
    with open(index, "wb") as f:
        f.write(data)
    r = cli("verify", "one")
    assert r.exit_code == 1 and "DAMAGED" in r.out, r
    assert f"time index entry {last} ({ts + 1} at offset {rel}) does not match the log" in r.out, r.out
