"""The kio types of a version imported for the first time by two threads at once (a parse thread
reading a request while a handler's thread writes the answer of the same version): each held one
module's import lock and waited for the other's, and Python raised _DeadlockError in one of them
(seen as a failed request in tests/server/test_serve_bad_utf8.py). klog.protocol.schemas imports the
version's whole package first."""

from __future__ import annotations

import sys
import threading

import pytest

pytest.importorskip("kio")


def _load_both_at_once(api_key: int, version: int, failures: list[BaseException]) -> None:
    from kio.static.constants import EntityType

    from klog.protocol import schemas

    barrier = threading.Barrier(2)

    def load(kind: EntityType) -> None:
        barrier.wait()
        try:
            schemas.payload_module(api_key, version, kind)
        except BaseException as e:  # noqa: BLE001 - _DeadlockError is what this looks for
            failures.append(e)

    threads = [threading.Thread(target=load, args=(kind,)) for kind in (EntityType.request, EntityType.response)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)


@pytest.mark.slow
def test_a_request_and_its_response_imported_at_once_never_deadlock():
    from kio.index import api_key_map

    from klog.protocol import schemas

    api_key, version = 19, 1  # CreateTopics v1: a type klog vendors (legacy_schema)
    package = f"klog.protocol.legacy_schema.{api_key_map[api_key]}.v{version}"
    schemas.payload_module(api_key, version, 0)  # (imported once, kept: restored after the test)
    saved = {m: mod for m, mod in sys.modules.items() if m == package or m.startswith(package + ".")}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: the old code failed ~1 attempt in 12
    failures: list[BaseException] = []
    try:
        for _ in range(100):
            for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
                del sys.modules[name]
            schemas.payload_module.cache_clear()
            _load_both_at_once(api_key, version, failures)
    finally:
        sys.setswitchinterval(interval)
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]
        sys.modules.update(saved)  # the types every other test in this process already holds
        parent, _, child = package.rpartition(".")
        setattr(sys.modules[parent], child, saved[package])
        schemas.payload_module.cache_clear()
    assert not failures, failures[:3]
