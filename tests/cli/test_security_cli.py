"""`klog users|acls|quotas` as a user runs them: passwords from stdin (never argv, never stored),
kafka-acls.sh's flags, quotas per entity; effects checked through the library, errors one line."""

from __future__ import annotations

import json

import klog
from klog.meta.acls import AclsMeta
from klog.meta.credentials import CredentialsMeta
from klog.meta.quotas import QuotasMeta
from klog.security.acl import Operation, PatternType, ResourceType, authorize
from klog.security.quota import entity
from klog.security.scram import check_password


def _one_line_error(r, text):
    assert r.exit_code == 2, r.stderr
    assert r.stderr.count("\n") == 1 and text in r.stderr and "Traceback" not in r.stderr


def test_users_add_list_delete(cli, data_dir):
    assert cli("users", "add", "alice", input=b"hunter2\n").exit_code == 0
    assert cli("users", "add", "alice", "-m", "SCRAM-SHA-512", input=b"hunter2\n").exit_code == 0
    r = cli("users", "list", "--json")
    assert [json.loads(line)["mechanism"] for line in r.out.splitlines()] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    with klog.open(data_dir) as store:
        creds = CredentialsMeta(store.meta).for_user("alice")
        assert len(creds) == 2 and all(check_password(c, "hunter2") for c in creds)
    with open(f"{data_dir}/meta/data.mdb", "rb") as f:
        assert b"hunter2" not in f.read()
    assert cli("users", "delete", "alice", "-m", "SCRAM-SHA-512").exit_code == 0
    assert "SCRAM-SHA-512" not in cli("users", "list").out
    r = cli("users", "delete", "carol")
    assert r.exit_code == 1 and "no user 'carol'" in r.stderr


def test_users_add_refuses_bad_input(cli):
    _one_line_error(cli("users", "add", "alice", input=b"\n"), "no password on stdin")
    _one_line_error(cli("users", "add", "alice", "-m", "MD5", input=b"pw\n"), "unknown mechanism 'MD5'")
    _one_line_error(cli("users", "add", "alice", "--iterations", "10", input=b"pw\n"), "iterations must be")
    r = cli("users", "add", "alice", "pw")  # a password as an argument is not accepted
    assert r.exit_code == 2


def test_acls_add_list_remove(cli, data_dir):
    r = cli("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "write",
            "--topic", "logs-", "--resource-pattern-type", "prefixed")
    assert r.exit_code == 0 and "Added 2 ACLs" in r.stderr
    assert cli("acls", "add", "--allow-principal", "User:bob", "--consumer", "--topic", "t", "--group", "g",
               "--deny-principal", "User:eve", "--deny-host", "10.0.0.66").exit_code == 0
    with klog.open(data_dir) as store:
        acls, config = AclsMeta(store.meta).list(), AclsMeta(store.meta).config()
    assert len(acls) == 2 + 3 * 2
    assert authorize(acls, config, "User:alice", "1.2.3.4", Operation.WRITE, ResourceType.TOPIC, "logs-app")
    assert not authorize(acls, config, "User:alice", "1.2.3.4", Operation.WRITE, ResourceType.TOPIC, "t")
    assert authorize(acls, config, "User:bob", "1.2.3.4", Operation.READ, ResourceType.GROUP, "g")
    assert not authorize(acls, config, "User:eve", "10.0.0.66", Operation.READ, ResourceType.TOPIC, "t")
    r = cli("acls", "list", "--topic", "logs-app", "--resource-pattern-type", "match", "--json")
    assert {json.loads(line)["operation"] for line in r.out.splitlines()} == {"READ", "WRITE"}
    r = cli("acls", "remove", "--topic", "t", "--principal", "User:bob")
    assert r.exit_code == 0 and "Removed 2 ACLs" in r.stderr
    with klog.open(data_dir) as store:
        assert all(b.resource_name != "t" or b.principal == "User:eve" for b in AclsMeta(store.meta).list())
        assert {b.pattern_type for b in AclsMeta(store.meta).list()} == {PatternType.LITERAL, PatternType.PREFIXED}


def test_acls_refuse_bad_input(cli):
    _one_line_error(cli("acls", "add", "--allow-principal", "bob", "--operation", "Read", "--topic", "t"),
                    "principal 'bob' must be TYPE:NAME")
    _one_line_error(cli("acls", "add", "--allow-principal", "User:bob", "--operation", "Fly", "--topic", "t"),
                    "unknown operation 'Fly'")
    _one_line_error(cli("acls", "add", "--allow-principal", "User:bob", "--operation", "Read"), "give a resource")
    _one_line_error(cli("acls", "add", "--allow-principal", "User:b", "--operation", "IdempotentWrite", "--topic",
                        "t"), "operation IDEMPOTENT_WRITE does not apply to a TOPIC")
    _one_line_error(cli("acls", "remove"), "give a resource")


def test_acls_settings(cli, data_dir):
    r = cli("acls", "settings", "--super-user", "User:admin", "--allow-everyone-if-no-acl-found", "false")
    assert r.out.splitlines() == ["super.users=User:admin", "allow.everyone.if.no.acl.found=false"]
    with klog.open(data_dir) as store:
        config = AclsMeta(store.meta).config()
    assert config.super_users == {"User:admin"} and config.allow_everyone_if_no_acl_found is False
    assert "allow.everyone.if.no.acl.found=auto" in cli("acls", "settings", "--allow-everyone-if-no-acl-found",
                                                         "auto").out
    _one_line_error(cli("acls", "settings", "--allow-everyone-if-no-acl-found", "maybe"), "must be true, false")


def test_super_users_take_kafkas_semicolon_separated_list(cli, data_dir):
    r = cli("acls", "settings", "--super-user", "User:a;User:b", "--super-user", " User:c ;")
    assert r.out.splitlines()[0] == "super.users=User:a;User:b;User:c"  # three principals, not one "User:a;User:b"
    with klog.open(data_dir) as store:
        assert AclsMeta(store.meta).config().super_users == {"User:a", "User:b", "User:c"}
    _one_line_error(cli("acls", "settings", "--super-user", "User:a;bob"), "super user 'bob' must be TYPE:NAME")


def test_quotas(cli, data_dir):
    assert cli("quotas", "set", "--user", "alice", "producer_byte_rate=1024", "request_percentage=50").exit_code == 0
    assert cli("quotas", "set", "--user-default", "--client-id", "app", "consumer_byte_rate=1e6").exit_code == 0
    assert cli("quotas", "remove", "--user", "alice", "request_percentage").exit_code == 0
    with klog.open(data_dir) as store:
        assert QuotasMeta(store.meta).all() == {entity("alice"): {"producer_byte_rate": 1024.0},
                                                entity(None, "app"): {"consumer_byte_rate": 1e6}}
    rows = [json.loads(line) for line in cli("quotas", "list", "--json").out.splitlines()]
    assert {"entity": {"client-id": "app", "user": None}, "quotas": {"consumer_byte_rate": 1e6}} in rows
    _one_line_error(cli("quotas", "set", "--user", "a", "nope=1"), "unknown quota 'nope'")
    _one_line_error(cli("quotas", "set", "--user", "a", "producer_byte_rate=-5"), "must be a positive number")
    _one_line_error(cli("quotas", "set", "producer_byte_rate=5"), "give --user")


def test_quotas_print_every_digit(cli):
    """`quotas list` printed producer_byte_rate=1.04858e+06 for 1048576 (six significant digits)."""
    r = cli("quotas", "set", "--user", "alice", "producer_byte_rate=1048576", "request_percentage=12.5")
    assert r.exit_code == 0 and "producer_byte_rate=1048576,request_percentage=12.5" in r.stderr, r
    assert cli("quotas", "list").out.splitlines()[1].split() == [
        "user=alice", "producer_byte_rate=1048576,request_percentage=12.5"]


def test_store_from_before_security_reads_as_having_none(cli, data_dir):
    """A store last written by a klog without users/ACLs/quotas: read-only listings say 'none'
    (the databases cannot be created read-only), and the next write creates them."""
    import lmdb

    assert cli("topics", "create", "t").exit_code == 0
    env = lmdb.open(f"{data_dir}/meta", max_dbs=16, subdir=True)
    with env.begin(write=True) as txn:
        for name in (b"credentials", b"acls", b"quotas"):
            txn.drop(env.open_db(name, txn=txn), delete=True)
    env.close()
    for command in (("users", "list"), ("acls", "list"), ("quotas", "list"), ("topics", "list")):
        r = cli(*command)
        assert r.exit_code == 0, (command, r.stderr)
    assert cli("acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t").exit_code == 0
    assert "User:a" in cli("acls", "list").out


def test_acls_add_producer_covers_transactional_ids(cli, data_dir):
    """kafka-acls.sh --producer --transactional-id grants Write and Describe on the id too: a
    transactional producer needs both (klog added only the topic's, saying 'Added 3 ACLs')."""
    r = cli("acls", "add", "--allow-principal", "User:alice", "--producer", "--idempotent", "--topic", "out",
            "--transactional-id", "tx")
    assert r.exit_code == 0 and "Added 6 ACLs" in r.stderr
    with klog.open(data_dir) as store:
        acls, config = AclsMeta(store.meta).list(), AclsMeta(store.meta).config()
    for op in (Operation.WRITE, Operation.DESCRIBE):
        assert authorize(acls, config, "User:alice", "1.2.3.4", op, ResourceType.TRANSACTIONAL_ID, "tx")
    assert not authorize(acls, config, "User:alice", "1.2.3.4", Operation.WRITE, ResourceType.TRANSACTIONAL_ID, "ty")
    assert authorize(acls, config, "User:alice", "1.2.3.4", Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                     "kafka-cluster")
