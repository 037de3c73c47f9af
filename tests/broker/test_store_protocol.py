"""The broker layer names the store it is given by a Protocol of its own (klog.broker.store_protocol),
never an upward import: every `store` parameter in klog/broker is annotated with it, and the local
store (and, for resolving names, a cluster's) offers every member the Protocols list."""

import ast
import inspect
import pathlib
import typing

from klog.broker.store_protocol import BrokerStore, TopicLookup
from klog.client.remote.store import RemoteStore
from klog.client.store import Store

BROKER = pathlib.Path(__file__).resolve().parents[2] / "klog" / "broker"


def _members(protocol: type) -> set[str]:
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass not in (typing.Protocol, typing.Generic, object):
            names |= {n for n in vars(klass) if not n.startswith("_")} | set(getattr(klass, "__annotations__", {}))
    return names


def test_every_store_parameter_in_the_broker_layer_is_typed() -> None:
    untyped = []
    for path in sorted(BROKER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                untyped += [f"{path.name}:{node.lineno} {node.name}" for a in node.args.args + node.args.kwonlyargs
                            if a.arg == "store" and a.annotation is None]
    assert not untyped


def test_the_stores_offer_what_the_protocols_name() -> None:
    source = inspect.getsource(Store)
    missing = [n for n in sorted(_members(BrokerStore)) if not hasattr(Store, n) and f"self.{n} =" not in source]
    assert not missing
    assert [n for n in sorted(_members(TopicLookup)) if not hasattr(RemoteStore, n)] == []
