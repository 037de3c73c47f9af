"""The server's Authorizer decides each (principal, host, operation, resource) once per load of the
ACLs (every request of a consumer or producer asks the same question; with many bindings each
decision walks them all), and a change of the ACLs, by this server or another process, is seen as
before: at once after invalidate(), within reload_ms otherwise."""

from __future__ import annotations

from klog.meta.acls import AclsMeta
from klog.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from klog.server import authorizer as authorizer_module
from klog.server.authorizer import ANSWERS_MAX, Authorizer


def _allow(principal: str, topic: str) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, principal, "*", Operation.READ, Permission.ALLOW)


def test_a_decision_is_made_once_per_load_of_the_acls(store, monkeypatch):
    decided = []
    real = authorizer_module.authorize

    def counting(*args):  # noqa: ANN002, ANN202
        decided.append(args[2:])
        return real(*args)

    monkeypatch.setattr(authorizer_module, "authorize", counting)
    auth = Authorizer(store, reload_ms=3_600_000)
    for _ in range(3):
        assert auth.allows("User:bob", "10.0.0.1", Operation.READ, ResourceType.TOPIC, "t")
    assert len(decided) == 1
    assert auth.allows("User:bob", "10.0.0.2", Operation.READ, ResourceType.TOPIC, "t")  # another host: asked
    assert auth.allows("User:bob", "10.0.0.1", "READ", "TOPIC", "u")  # (names of the operation and type)
    assert len(decided) == 3

    AclsMeta(store.meta).add([_allow("User:alice", "t")])  # (t now has an ACL: only alice reads it)
    assert auth.allows("User:bob", "10.0.0.1", Operation.READ, ResourceType.TOPIC, "t")  # not reloaded yet
    auth.invalidate()  # (what CreateAcls does on this server)
    assert not auth.allows("User:bob", "10.0.0.1", Operation.READ, ResourceType.TOPIC, "t")
    assert auth.allows("User:alice", "10.0.0.1", Operation.READ, ResourceType.TOPIC, "t")
    assert len(decided) == 5


def test_another_processs_change_is_seen_at_the_next_reload(store):
    auth = Authorizer(store, reload_ms=0)  # (every call is a reload's time)
    assert auth.allows("User:bob", "h", Operation.READ, ResourceType.TOPIC, "t")
    AclsMeta(store.meta).add([_allow("User:alice", "t")])
    assert not auth.allows("User:bob", "h", Operation.READ, ResourceType.TOPIC, "t")


def test_the_decisions_kept_are_bounded(store, monkeypatch):
    monkeypatch.setattr(authorizer_module, "ANSWERS_MAX", 50)
    auth = Authorizer(store, reload_ms=3_600_000)
    for i in range(3 * 50 + 7):  # (topic names come from clients)
        assert auth.allows("User:bob", "h", Operation.READ, ResourceType.TOPIC, f"t{i}")
    assert len(auth._answers) <= 50 < ANSWERS_MAX
