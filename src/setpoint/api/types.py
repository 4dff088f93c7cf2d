"""Kinds and typed objects: what names a kind in a call, and what its objects come back as.

Every reader and writer (the live client, the tracking client, the cache and its consistent
reader, the testing fake) takes a kind as a :class:`Kind`:

- a :class:`~setpoint.api.gvk.GroupVersionKind` is a ``Kind[JsonObject]``: objects are the
  JSON dicts the API server sends;
- a typed class (one satisfying :class:`TypedObject`, such as a
  :class:`setpoint.api.resource.Resource`) is a ``Kind`` of its instances.

So each method has one signature, ``get(kind: Kind[T], name) -> T``: ``get(kinds.ConfigMap,
...)`` is a ``JsonObject``, ``get(Tenant, ...)`` a ``Tenant``. Methods that take an object
(create, update, apply, ...) return the same type as they were given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypeVar, cast, runtime_checkable

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject, gvk_of

if TYPE_CHECKING:
    # Only for the annotation: importing typing_extensions at run time costs ~10 ms of
    # every start (it imports inspect and ast).
    from typing_extensions import TypeIs

__all__ = ["Kind", "TypedObject", "is_typed", "kind_of", "split_kind"]

T_co = TypeVar("T_co", covariant=True)


class Kind(Protocol[T_co]):
    """A kind handle: names a kind (its :attr:`gvk`) and types its objects (``T_co``).

    A :class:`~setpoint.api.gvk.GroupVersionKind` is a ``Kind[JsonObject]`` (its
    :meth:`from_object` returns the dict it is given); a typed class is a ``Kind`` of its
    instances (its ``gvk`` class attribute and ``from_object`` class method are the
    protocol's members). Methods that accept any kind and return no object of it (``delete``,
    ``resource_info``, ...) take a ``Kind[object]``.

    Caveat: mypy does not match ``type[R]`` of a type *variable* ``R`` against this
    protocol; a helper generic over the class takes ``kind: Kind[R]`` rather than
    ``cls: type[R]`` (concrete classes, ``type[Tenant]``, match as they are).
    """

    @property
    def gvk(self) -> GroupVersionKind:
        """The group, version and kind this handle names."""
        ...

    def from_object(self, obj: JsonObject, /) -> T_co:
        """An object of this kind from its JSON form, as the API server sent it."""
        ...


@runtime_checkable
class TypedObject(Protocol):
    """A typed API object that converts losslessly to and from its JSON form."""

    gvk: ClassVar[GroupVersionKind]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Parse the JSON form sent by the API server. Unknown fields must survive."""
        ...

    def to_object(self) -> dict[str, Any]:
        """Serialize to the JSON form, with ``apiVersion``, ``kind`` and ``metadata``."""
        ...


def is_typed(obj: object) -> TypeIs[TypedObject]:
    """Whether ``obj`` is a typed object rather than a JSON dict.

    Use this, not ``isinstance(obj, TypedObject)``, on hot paths: a runtime-checkable
    protocol check inspects every member and costs about 16 µs on Python 3.11, and the
    runtime does it several times per reconcile. JSON dicts, by far the most common
    case, are answered in one type check.
    """
    if isinstance(obj, dict):
        return False
    cls = type(obj)
    return hasattr(cls, "gvk") and hasattr(cls, "from_object") and hasattr(cls, "to_object")


Obj = TypeVar("Obj", bound="JsonObject | TypedObject")


def kind_of(obj: Obj) -> Kind[Obj]:
    """The kind to address ``obj`` by: its typed class, or for a dict the GVK it names.

    Raises:
        ValueError: ``obj`` is a dict without ``apiVersion`` or ``kind``.

    """
    kind: Kind[object] = type(obj) if is_typed(obj) else gvk_of(obj)
    # A typed class is a Kind of its own instances, a dict's GVK a Kind of dicts: the
    # object's own type either way, which mypy cannot follow through is_typed.
    return cast("Kind[Obj]", kind)


def split_kind(kind: Kind[object]) -> tuple[GroupVersionKind, type[TypedObject] | None]:
    """Split a kind into its GVK and, for a typed class, the class itself (else ``None``).

    It checks what it is given (a kind may come from configuration or from untyped code),
    so it is the place to turn a kind argument into what the runtime stores by.

    Raises:
        TypeError: ``kind`` is neither a GroupVersionKind nor a class with a ``gvk``.

    """
    if isinstance(kind, GroupVersionKind):
        return kind, None
    gvk = getattr(kind, "gvk", None)
    if not isinstance(gvk, GroupVersionKind):
        raise TypeError(
            f"{kind!r} is not a kind: pass a GroupVersionKind or a typed class with a 'gvk' "
            "class attribute (a setpoint Resource)"
        )
    return gvk, cast("type[TypedObject]", kind)
