"""klog.store.faults.point reads $KLOG_CRASH_AT as it is when the point is reached (a test or a
parent sets it after klog is imported), through os.environ's own mapping."""

from __future__ import annotations

from klog.store import faults


def test_a_crash_point_sees_the_variable_set_and_removed_after_import(monkeypatch):
    monkeypatch.setattr(faults, "_hits", {})
    faults.point("first-append")  # not set: nothing counted
    assert faults._hits == {}
    monkeypatch.setenv(faults.CRASH_ENV, "first-append:1000000")  # (counted, far from the kill)
    faults.point("first-append")
    faults.point("sealed-fsync")  # another step: not counted
    assert faults._hits == {"first-append": 1}
    monkeypatch.delenv(faults.CRASH_ENV)
    faults.point("first-append")
    assert faults._hits == {"first-append": 1}
