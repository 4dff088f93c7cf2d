"""The base classes and scalar types of the generated built-in kinds.

Every generated struct is a :class:`KindModel`, every top-level kind (``Deployment``,
``Pod``, ...) a :class:`KindObject`. They keep the semantics of setpoint's own models
(:class:`setpoint.api.resource.Model`): camelCase JSON names, unknown fields kept through a
round trip, and **field presence**: a field never assigned is never written, so an apply of
a typed object sends exactly the fields that were set (the server-side apply contract).

Schemas are built on first use (pydantic's ``defer_build``), not when the module is
imported: importing ``core_v1`` defines about 200 classes and that must stay cheap.
Decision record: docs/decisions/0032-typed-builtin-kinds.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.api.resource import Model, ObjectMeta, OwnerReference

__all__ = [
    "FieldsV1",
    "GroupVersionKind",
    "IntOrString",
    "KindModel",
    "KindObject",
    "MicroTime",
    "ObjectMeta",
    "OwnerReference",
    "Quantity",
    "RawExtension",
    "ResourceInfo",
    "Time",
]

IntOrString: TypeAlias = int | str
"""A port or a percentage: ``8080``, ``"http"``, ``"25%"`` (Go's ``intstr.IntOrString``)."""
Quantity: TypeAlias = str
"""A resource quantity as the server stores it, ``"500m"``, ``"1Gi"``, ``"2"``: a string, so
that a desired value compares equal to the stored one and an unchanged child is not applied
again (the server accepts a JSON number, but answers with the string)."""
Time: TypeAlias = str
"""An RFC 3339 timestamp as the server writes it (kept as text: lossless, and cheap)."""
MicroTime: TypeAlias = str
"""An RFC 3339 timestamp with microseconds, as text."""
RawExtension: TypeAlias = dict[str, Any]
"""An embedded object of any kind, as JSON."""
FieldsV1: TypeAlias = dict[str, Any]
"""A managed-fields set, as JSON."""


class KindModel(Model):
    """Base class of every generated struct of a built-in kind (``PodSpec``, ``Container``)."""

    model_config = ConfigDict(use_attribute_docstrings=False, defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # Model's checks of JSON names run at class creation, for every class; the generator
        # writes the names (tests/unit/api/test_kinds_generated.py checks them once), and
        # skipping them keeps ``import core_v1`` cheap. No generated field has a default
        # but None, which Model's serializer drops unless assigned.
        BaseModel.__pydantic_init_subclass__.__func__(cls, **kwargs)  # type: ignore[attr-defined]


class KindObject(KindModel):
    """Base class of a generated top-level kind; satisfies :class:`~setpoint.api.types.TypedObject`.

    The class is a kind handle: ``await client.get(apps_v1.Deployment, "web", namespace="ns")``
    returns a ``Deployment``, as a setpoint :class:`~setpoint.api.resource.Resource` class
    does. ``apiVersion`` and ``kind`` are not fields: they come from :attr:`gvk`, are checked
    when parsing and are always written by :meth:`to_object`.
    """

    gvk: ClassVar[GroupVersionKind]
    """The group, version and kind of this class's objects."""
    resource: ClassVar[ResourceInfo | None] = None
    """Plural, scope and subresources as the API server serves them (``None`` for kinds
    only ever sent to a subresource, such as ``Eviction``)."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata (setpoint's :class:`~setpoint.api.resource.ObjectMeta`)."""

    @classmethod
    def resource_info(cls) -> ResourceInfo:
        """Plural, scope and subresources, so the fake client needs no discovery for this kind.

        Raises:
            TypeError: the kind has no REST collection of its own (:attr:`resource` is None).

        """
        if cls.resource is None:
            raise TypeError(f"{cls.gvk.kind} {cls.gvk.api_version} has no collection to address")
        return cls.resource

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Parse the JSON form sent by the API server; unknown fields are kept.

        Raises:
            pydantic.ValidationError: a value has the wrong type, or apiVersion/kind name
                another kind.

        """
        return cls.model_validate(obj, by_alias=True, by_name=False)

    def to_object(self) -> dict[str, Any]:
        """The JSON form: apiVersion, kind, metadata and the fields that were set."""
        data = self.model_dump(mode="json", by_alias=True)
        out: dict[str, Any] = {
            "apiVersion": self.gvk.api_version,
            "kind": self.gvk.kind,
            "metadata": data.pop("metadata", {}),
        }
        out.update(data)
        return out

    @model_validator(mode="before")
    @classmethod
    def _check_type_meta(cls, data: Any) -> Any:
        # apiVersion and kind are not fields: check they name this class, then drop them so
        # they do not land among the unknown fields and get written twice.
        if not isinstance(data, Mapping) or ("apiVersion" not in data and "kind" not in data):
            return data
        api_version, kind = data.get("apiVersion"), data.get("kind")
        if (api_version is not None and api_version != cls.gvk.api_version) or (
            kind is not None and kind != cls.gvk.kind
        ):
            raise ValueError(
                f"{cls.__name__} parses {cls.gvk.api_version} {cls.gvk.kind} objects, but got "
                f"apiVersion={api_version!r} kind={kind!r}"
            )
        return {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
