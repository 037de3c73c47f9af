"""Record classes without @dataclass: what `klog consume t -n 1` would otherwise pay at every start.

A dataclass compiles its methods when its class is created (~0.5 ms each; the hot commands load
about 25 record classes) and `dataclasses` imports inspect, ast, dis and tokenize (~5 ms). A record
class here writes its own `__init__` and names its fields once in `_fields`; `Plain` gives it the
`repr` and `==` a dataclass would generate, `FrozenPlain` adds the hash and refuses assignment
(what `frozen=True` does), and `replace` is `dataclasses.replace` for them. `dataclasses.fields`,
`replace`, `asdict` and `is_dataclass` still take them: their `__dataclass_fields__` is built when
first asked for (importing dataclasses then, not at start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a TypeVar bound by name compiles the name: the process's first compile() is ~2 ms
    from typing import TypeVar

    T = TypeVar("T", bound="Plain")


class _DataclassFields:
    """A record class's `__dataclass_fields__`, made on first use and then kept on the class."""

    def __get__(self, obj: object, cls: type[Plain]) -> dict:
        import dataclasses

        fields = {}
        for name in cls._fields:
            f = dataclasses.field()
            f.name, f.type, f._field_type = name, object, dataclasses._FIELD  # type: ignore[attr-defined]
            fields[name] = f
        cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]
        return fields


class Plain:
    """`repr` and `==` from `_fields`, as a dataclass has them; unhashable, like a mutable dataclass."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    __dataclass_fields__ = _DataclassFields()

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._fields)})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple(getattr(self, n) for n in self._fields) == tuple(getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]


class FrozenPlain(Plain):
    """A frozen record: hashable by its fields; `__init__` sets them with object.__setattr__."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in self._fields))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple:  # pickle and copy: unpickling would assign the fields
        return _rebuild, (type(self), tuple(getattr(self, n) for n in self._fields))


def _rebuild(cls: type[FrozenPlain], values: tuple) -> FrozenPlain:
    obj = object.__new__(cls)
    for name, value in zip(cls._fields, values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


def replace(obj: T, **changes: Any) -> T:
    """A copy of `obj` with `changes` (dataclasses.replace for a Plain record)."""
    unknown = set(changes) - set(obj._fields)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {sorted(unknown)[0]!r}")
    return type(obj)(**{n: changes[n] if n in changes else getattr(obj, n) for n in obj._fields})
