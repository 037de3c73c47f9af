"""`klog users|acls|quotas`: SASL users, ACLs (kafka-acls.sh's flags) and client quotas for `klog serve`."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from klog.cli.app import DataDirOpt, JsonOpt, open_store
from klog.cli.env import current_env
from klog.errors import UsageError

users_app = typer.Typer(help="SASL users (SCRAM-SHA-256/512, also checked for PLAIN): add, list, delete.",
                        no_args_is_help=True)
acls_app = typer.Typer(help="ACLs for `klog serve`, with kafka-acls.sh's flags: add, list, remove, settings.",
                       no_args_is_help=True)
quotas_app = typer.Typer(help="Client quotas for `klog serve` (per user and/or client id): set, remove, list.",
                         no_args_is_help=True)

MechanismOpt = Annotated[str, typer.Option("--mechanism", "-m", help="SCRAM-SHA-256 or SCRAM-SHA-512.")]


def _read_password(prompt: bool) -> str:
    """From a prompt (twice) on a terminal, else the first line of stdin: never from argv."""
    if prompt and current_env().stdin_tty:
        import getpass

        first = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != first:
            raise UsageError("the passwords differ")
        return first
    line = sys.stdin.readline()
    password = line.rstrip("\r\n")
    if not password:
        raise UsageError("no password on stdin (give it as the first line)")
    return password


@users_app.command("add")
def users_add(
    name: str,
    mechanism: MechanismOpt = "SCRAM-SHA-256",
    iterations: Annotated[int, typer.Option("--iterations", help="PBKDF2 iterations (4096-16384).")] = 4096,
    data_dir: DataDirOpt = None,
) -> None:
    """Add NAME (or replace its password); the password comes from a prompt or the first line of stdin."""
    from klog.meta.credentials import validate_mechanism, validate_user

    validate_user(name)
    mechanism = validate_mechanism(mechanism)
    password = _read_password(prompt=True)
    with open_store(data_dir) as store:
        store.credentials.add(name, mechanism, password, iterations)
    print(f"Added user {name} ({mechanism})", file=sys.stderr)


@users_app.command("list")
def users_list(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every user with its mechanisms and iterations (never a password or key)."""
    with open_store(data_dir, create=False, read_only=True) as store:
        rows = store.credentials.list()
    if as_json:
        for user, mech, it in rows:
            print(json.dumps({"user": user, "mechanism": mech, "iterations": it}))
        return
    from klog.cli.tables import print_table

    print_table(["USER", "MECHANISM", "ITERATIONS"], rows)


@users_app.command("delete")
def users_delete(
    name: str,
    mechanism: Annotated[str | None, typer.Option("--mechanism", "-m",
                                                  help="Only this mechanism (default: all).")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Delete NAME's credentials (existing connections keep their session until they reconnect)."""
    with open_store(data_dir, create=False) as store:
        removed = store.credentials.delete(name, mechanism)
    print(f"Deleted user {name} ({', '.join(removed)})", file=sys.stderr)


# -- acls ------------------------------------------------------------------------------------------
Many = list[str] | None
AllowPrincipalOpt = Annotated[Many, typer.Option("--allow-principal", help="TYPE:NAME allowed (repeatable).")]
DenyPrincipalOpt = Annotated[Many, typer.Option("--deny-principal", help="TYPE:NAME denied (repeatable).")]
AllowHostOpt = Annotated[Many, typer.Option("--allow-host", help="Host (IP) of allowed principals (default *).")]
DenyHostOpt = Annotated[Many, typer.Option("--deny-host", help="Host (IP) of denied principals (default *).")]
OperationOpt = Annotated[Many, typer.Option("--operation", help="Read, Write, Create, Delete, Alter, Describe, "
                                                                "DescribeConfigs, AlterConfigs, IdempotentWrite, "
                                                                "ClusterAction or All (repeatable).")]
TopicOpt = Annotated[Many, typer.Option("--topic", help="Topic name, prefix or * (repeatable).")]
GroupOpt = Annotated[Many, typer.Option("--group", help="Group id, prefix or * (repeatable).")]
ClusterOpt = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
TxnOpt = Annotated[Many, typer.Option("--transactional-id", help="Transactional id, prefix or * (repeatable).")]
ProducerOpt = Annotated[bool, typer.Option("--producer", help="Producer ACLs: Write, Describe, Create on topics, "
                                                              "Write, Describe on transactional ids (and "
                                                              "IdempotentWrite on the cluster with "
                                                              "--idempotent).")]
IdempotentOpt = Annotated[bool, typer.Option("--idempotent", help="With --producer: IdempotentWrite too.")]
ConsumerOpt = Annotated[bool, typer.Option("--consumer", help="Consumer ACLs: Read, Describe on topics and "
                                                              "Read on groups.")]


def _pattern(value: str, allowed: tuple[str, ...]):  # noqa: ANN202 - PatternType
    from klog.security.acl import PatternType

    key = value.upper()
    if key not in allowed:
        raise UsageError(f"--resource-pattern-type must be one of {', '.join(a.lower() for a in allowed)}")
    return PatternType[key]


def _resources(topics: Many, groups: Many, cluster: bool, txn_ids: Many) -> list:
    from klog.security.acl import CLUSTER_NAME, ResourceType

    out = [(ResourceType.TOPIC, t) for t in topics or []] + [(ResourceType.GROUP, g) for g in groups or []]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids or []]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _print_acls(bindings: list, as_json: bool) -> None:
    if as_json:
        for b in bindings:
            print(json.dumps(b.to_json()))
        return
    from klog.cli.tables import print_table

    print_table(["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                [[b.resource_type.name, b.resource_name, b.pattern_type.name, b.principal, b.host,
                  b.operation.name, b.permission.name] for b in bindings])


@acls_app.command("add")
def acls_add(
    allow_principal: AllowPrincipalOpt = None, deny_principal: DenyPrincipalOpt = None,
    allow_host: AllowHostOpt = None, deny_host: DenyHostOpt = None, operation: OperationOpt = None,
    topic: TopicOpt = None, group: GroupOpt = None, cluster: ClusterOpt = False, transactional_id: TxnOpt = None,
    resource_pattern_type: Annotated[str, typer.Option("--resource-pattern-type",
                                                       help="literal or prefixed.")] = "literal",
    producer: ProducerOpt = False, idempotent: IdempotentOpt = False, consumer: ConsumerOpt = False,
    data_dir: DataDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """Add ACLs: every principal x host x operation x resource given (as kafka-acls.sh --add)."""
    from klog.security.acl import (
        CLUSTER_NAME,
        AclBinding,
        AclError,
        Operation,
        PatternType,
        Permission,
        ResourceType,
        parse_operation,
    )

    pattern = _pattern(resource_pattern_type, ("LITERAL", "PREFIXED"))
    if not allow_principal and not deny_principal:
        raise UsageError("give --allow-principal or --deny-principal")
    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise UsageError("give a resource: --topic, --group, --cluster or --transactional-id")
    try:
        ops = [parse_operation(o) for o in operation or []]
    except AclError as e:
        raise UsageError(str(e)) from None
    plan: list[tuple[ResourceType, str, Operation]] = [(rt, name, op) for rt, name in resources for op in ops]
    if producer or consumer:  # kafka-acls.sh's convenience sets
        for rt, name in resources:
            if rt == ResourceType.TOPIC and producer:
                plan += [(rt, name, op) for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]
            if rt == ResourceType.TRANSACTIONAL_ID and producer:  # (as AclCommand's producer set)
                plan += [(rt, name, op) for op in (Operation.WRITE, Operation.DESCRIBE)]
            if rt == ResourceType.TOPIC and consumer:
                plan += [(rt, name, op) for op in (Operation.READ, Operation.DESCRIBE)]
            if rt == ResourceType.GROUP and consumer:
                plan.append((rt, name, Operation.READ))
        if producer and idempotent:
            plan.append((ResourceType.CLUSTER, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE))
    if not plan:
        raise UsageError("give --operation (or --producer / --consumer)")
    entries = [(p, h, Permission.ALLOW) for p in allow_principal or [] for h in allow_host or ["*"]]
    entries += [(p, h, Permission.DENY) for p in deny_principal or [] for h in deny_host or ["*"]]
    bindings = [AclBinding(rt, name, pattern if rt != ResourceType.CLUSTER else PatternType.LITERAL, p, h, op, perm)
                for rt, name, op in dict.fromkeys(plan) for p, h, perm in entries]
    with open_store(data_dir) as store:
        added = store.acls.add(bindings)
    if as_json:
        _print_acls(added, True)
    else:
        print(f"Added {len(added)} ACL{'' if len(added) == 1 else 's'}", file=sys.stderr)


def _filter_args(topic: Many, group: Many, cluster: bool, txn_ids: Many, pattern_type: str,
                 principal: str | None, operation: str | None) -> list:
    from klog.errors import AclError
    from klog.security.acl import AclFilter, Operation, parse_operation

    pattern = _pattern(pattern_type, ("LITERAL", "PREFIXED", "MATCH", "ANY"))
    try:
        op = parse_operation(operation) if operation else Operation.ANY
    except AclError as e:
        raise UsageError(str(e)) from None
    resources = _resources(topic, group, cluster, txn_ids)
    if not resources:
        return [AclFilter(pattern_type=pattern, principal=principal, operation=op)]
    return [AclFilter(rt, name, pattern, principal, None, op) for rt, name in resources]


FilterPatternOpt = Annotated[str, typer.Option("--resource-pattern-type",
                                               help="literal, prefixed, match (every pattern that applies "
                                                    "to the name) or any.")]
PrincipalOpt = Annotated[str | None, typer.Option("--principal", help="Only this principal's ACLs.")]
OneOperationOpt = Annotated[str | None, typer.Option("--operation", help="Only this operation.")]


@acls_app.command("list")
def acls_list(
    topic: TopicOpt = None, group: GroupOpt = None, cluster: ClusterOpt = False, transactional_id: TxnOpt = None,
    resource_pattern_type: FilterPatternOpt = "any", principal: PrincipalOpt = None,
    operation: OneOperationOpt = None, data_dir: DataDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """List ACLs (all, or those on the resources given)."""
    filters = _filter_args(topic, group, cluster, transactional_id, resource_pattern_type, principal, operation)
    with open_store(data_dir, create=False, read_only=True) as store:
        bindings = sorted({b for f in filters for b in store.acls.list(f)})
    _print_acls(bindings, as_json)


@acls_app.command("remove")
def acls_remove(
    topic: TopicOpt = None, group: GroupOpt = None, cluster: ClusterOpt = False, transactional_id: TxnOpt = None,
    resource_pattern_type: FilterPatternOpt = "literal", principal: PrincipalOpt = None,
    operation: OneOperationOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Allowed to remove every ACL when no resource is "
                                                        "given.")] = False,
    data_dir: DataDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """Remove the ACLs matching the resources (and --principal / --operation) given."""
    if not _resources(topic, group, cluster, transactional_id) and not force:
        raise UsageError("give a resource (--topic, --group, --cluster, --transactional-id) or --force")
    filters = _filter_args(topic, group, cluster, transactional_id, resource_pattern_type, principal, operation)
    with open_store(data_dir, create=False) as store:
        removed = sorted({b for f in filters for b in store.acls.remove(f)})
    if as_json:
        _print_acls(removed, True)
    else:
        print(f"Removed {len(removed)} ACL{'' if len(removed) == 1 else 's'}", file=sys.stderr)


@acls_app.command("settings")
def acls_settings(
    super_user: Annotated[Many, typer.Option("--super-user", help="TYPE:NAME allowed everything (repeatable; "
                                                                 "replaces the list).")] = None,
    no_super_users: Annotated[bool, typer.Option("--no-super-users", help="Empty the list.")] = False,
    allow_everyone_if_no_acl_found: Annotated[str | None, typer.Option(
        "--allow-everyone-if-no-acl-found",
        help="true, false, or auto (true only while no ACL exists at all; the default).")] = None,
    data_dir: DataDirOpt = None, as_json: JsonOpt = False,
) -> None:
    """Show or change super.users and allow.everyone.if.no.acl.found (read by `klog serve` each second)."""
    allow: bool | None | str = "keep"
    if allow_everyone_if_no_acl_found is not None:
        choices = {"true": True, "false": False, "auto": None}
        if allow_everyone_if_no_acl_found.lower() not in choices:
            raise UsageError("--allow-everyone-if-no-acl-found must be true, false or auto")
        allow = choices[allow_everyone_if_no_acl_found.lower()]
    users = [] if no_super_users else super_user
    if users is None and allow == "keep":  # only shown: a store that is not there is not made
        with open_store(data_dir, create=False, read_only=True) as store:
            config = store.acls.config()
    else:
        with open_store(data_dir) as store:
            config = store.acls.set_config(users, allow)
    a = config.allow_everyone_if_no_acl_found
    doc = {"super.users": sorted(config.super_users),
           "allow.everyone.if.no.acl.found": "auto" if a is None else str(a).lower()}
    if as_json:
        print(json.dumps(doc))
    else:
        print(f"super.users={';'.join(doc['super.users'])}")
        print(f"allow.everyone.if.no.acl.found={doc['allow.everyone.if.no.acl.found']}")


# -- quotas ----------------------------------------------------------------------------------------
UserOpt = Annotated[str | None, typer.Option("--user", help="The user (principal name without 'User:').")]
UserDefaultOpt = Annotated[bool, typer.Option("--user-default", help="The default for every user.")]
ClientOpt = Annotated[str | None, typer.Option("--client-id", help="The client id.")]
ClientDefaultOpt = Annotated[bool, typer.Option("--client-default", help="The default for every client id.")]


def _entity(user: str | None, user_default: bool, client_id: str | None, client_default: bool):  # noqa: ANN202
    from klog.security.quota import entity

    if user is not None and user_default or client_id is not None and client_default:
        raise UsageError("give a name or the default, not both")
    u = None if user_default else (user if user is not None else False)
    c = None if client_default else (client_id if client_id is not None else False)
    if u is False and c is False:
        raise UsageError("give --user/--user-default and/or --client-id/--client-default")
    return entity(u, c)


def _entity_text(e) -> str:  # noqa: ANN001 - Entity
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in e)


def _quotas_text(quotas: dict[str, float]) -> str:
    """KEY=VALUE,...: every digit of the value (1048576, not 1.04858e+06), no '.0' on a whole number."""
    return ",".join(f"{k}={int(v) if v.is_integer() else v!r}" for k, v in sorted(quotas.items()))


@quotas_app.command("set")
def quotas_set(
    quotas: Annotated[list[str], typer.Argument(help="KEY=VALUE: producer_byte_rate, consumer_byte_rate "
                                                     "(bytes/s), request_percentage (percent of one thread).")],
    user: UserOpt = None, user_default: UserDefaultOpt = False,
    client_id: ClientOpt = None, client_default: ClientDefaultOpt = False, data_dir: DataDirOpt = None,
) -> None:
    """Set quotas of one entity (a user, a client id, or both; either may be the default)."""
    e = _entity(user, user_default, client_id, client_default)
    values = {}
    for pair in quotas:
        key, eq, value = pair.partition("=")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"invalid quota {pair!r}: use KEY=NUMBER") from None
        if not eq:
            raise UsageError(f"invalid quota {pair!r}: use KEY=NUMBER")
    with open_store(data_dir) as store:
        now = store.quotas.alter(e, set_=values)
    print(f"Quotas of {_entity_text(e)}: {_quotas_text(now) or '(none)'}", file=sys.stderr)


@quotas_app.command("remove")
def quotas_remove(
    keys: Annotated[list[str], typer.Argument(help="Quota keys to remove.")],
    user: UserOpt = None, user_default: UserDefaultOpt = False,
    client_id: ClientOpt = None, client_default: ClientDefaultOpt = False, data_dir: DataDirOpt = None,
) -> None:
    """Remove quotas of one entity."""
    e = _entity(user, user_default, client_id, client_default)
    with open_store(data_dir, create=False) as store:
        now = store.quotas.alter(e, remove=keys)
    print(f"Quotas of {_entity_text(e)}: {_quotas_text(now) or '(none)'}", file=sys.stderr)


@quotas_app.command("list")
def quotas_list(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Every entity with quotas."""
    with open_store(data_dir, create=False, read_only=True) as store:
        rows = sorted(store.quotas.all().items(), key=lambda kv: _entity_text(kv[0]))
    if as_json:
        for e, q in rows:
            print(json.dumps({"entity": {t: n for t, n in e}, "quotas": q}))
        return
    from klog.cli.tables import print_table

    print_table(["ENTITY", "QUOTAS"], [[_entity_text(e), _quotas_text(q)] for e, q in rows])


def register(root: typer.Typer) -> None:
    """Add `klog users`, `klog acls` and `klog quotas` to the root app."""
    root.add_typer(users_app, name="users")
    root.add_typer(acls_app, name="acls")
    root.add_typer(quotas_app, name="quotas")
