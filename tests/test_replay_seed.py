"""The replay_seed fixture (tests/conftest.py): a random schedule's seed comes from KLOG_TEST_SEED when
set, so a failure's report line (`reproduce with: KLOG_TEST_SEED=N ...`) replays it."""

from __future__ import annotations


def test_default_seed_without_the_variable(replay_seed, monkeypatch):
    monkeypatch.delenv("KLOG_TEST_SEED", raising=False)
    assert replay_seed(7) == 7


def test_klog_test_seed_replays(replay_seed, monkeypatch, request):
    monkeypatch.setenv("KLOG_TEST_SEED", "42")
    assert replay_seed(7) == 42
    assert ("seed", 42) in request.node.user_properties  # what a failure's report names
