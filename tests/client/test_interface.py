"""The local store and a cluster's share one interface (klog.client.interface.AnyStore): each has
every method the Protocol declares, with its parameters (names, order, kinds) and nothing the
Protocol lacks that both of them offer."""

from __future__ import annotations

import inspect

from klog.client.interface import AnyStore
from klog.client.remote.store import RemoteStore
from klog.client.store import Store

# parameters one store takes beyond the interface, each with its reason
EXTRA = {
    ("Store", "create_topic", "adopt_folders"),  # a local store can adopt folders `klog dirs import` left
}


def declared(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


def public_methods(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


def parameters(cls: type, name: str) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in inspect.signature(getattr(cls, name)).parameters.values()
            if (cls.__name__, name, p.name) not in EXTRA]


def test_both_stores_have_every_method_of_the_interface_with_its_parameters():
    for cls in (Store, RemoteStore):
        for name in sorted(declared(AnyStore)):
            assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
            assert parameters(cls, name) == parameters(AnyStore, name), f"{cls.__name__}.{name}"


def test_what_both_stores_offer_is_in_the_interface():
    shared = public_methods(Store) & public_methods(RemoteStore)
    assert shared - declared(AnyStore) == set(), "add it to klog.client.interface.AnyStore"


def test_both_stores_have_the_attributes_of_the_interface(tmp_path):
    with Store(str(tmp_path / "data")) as store:
        assert isinstance(store.path, str) and callable(store.warn)
    assert set(AnyStore.__annotations__) == {"path", "warn"}
