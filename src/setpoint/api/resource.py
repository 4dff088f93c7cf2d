"""Typed API resources: declare a Kubernetes API once, as Python types.

A custom resource is a :class:`Resource` subclass with typed ``spec`` and
``status`` models, declared with ``@sp.resource`` (:mod:`setpoint.api.declaration`)::

    import setpoint as sp

    class WidgetSpec(sp.Model):
        \"\"\"What the user wants.\"\"\"

        replicas: int = sp.field(default=1, minimum=0, maximum=10)
        \"\"\"How many widgets to run.\"\"\"

    @sp.resource(group="demo.setpoint.dev", version="v1", short_names=["wd"])
    class Widget(sp.Resource):
        \"\"\"A widget.\"\"\"

        spec: WidgetSpec
        status: WidgetStatus | None = None

The same classes give typed objects in reconcilers (:meth:`Resource.from_object`
and :meth:`Resource.to_object` convert to and from the JSON the API server
speaks) and, through :mod:`setpoint.crd`, the CustomResourceDefinition.

Semantics every model here keeps:

* **JSON names are camelCase, derived from snake_case Python names**
  (``max_replicas`` -> ``maxReplicas``; one trailing ``_`` is dropped, so
  ``from_`` -> ``from``). ``sp.field(json_name=...)`` overrides. A derived
  name that would not convert back to the Python name (``replicas_2`` ->
  ``replicas2``) is a ``DeclarationError`` when the class is defined: a
  field is never silently renamed or dropped.
* **Unknown fields survive**: JSON keys the model does not declare are kept
  and written back unchanged, so a newer server or another controller never
  loses data through this controller.
* **Unset is not zero**: an optional field that is absent reads as ``None``
  and is omitted when written; ``0``, ``""`` and ``False`` are values and are
  written. A field left at its default and never assigned is omitted (the
  server applies the same default, see ``sp.field``), so typed objects are
  safe to use for server-side apply.
* **Field constraints are the API server's job.** ``sp.field`` constraints
  go into the CRD schema and are enforced by the server (which also runs the
  CEL rules Python cannot); the Python model still checks types. A reconciler
  can therefore always read what the server stored, even after a schema
  tightened.

The declarations (``sp.field``, ``sp.resource``, CEL rules, printer columns) are in
:mod:`setpoint.api.declaration`; this module holds the runtime models that carry them.
It imports only pydantic and :mod:`setpoint.api`; it stays cheap to import.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, ClassVar, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticUndefined

from setpoint.api.declaration import DeclarationError, ResourceOptions, Rule, field_schema_of
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo

__all__ = [
    "COMPARE_VALUES",
    "SPELL_OUT_DEFAULTS",
    "Model",
    "ObjectMeta",
    "OwnerReference",
    "Resource",
    "json_name_for",
    "python_name_for",
    "semantic_json",
]


# --------------------------------------------------------------------------- JSON names


def json_name_for(python_name: str) -> str:
    """The camelCase JSON name derived from a snake_case Python attribute name.

    ``max_replicas`` -> ``maxReplicas``; one trailing underscore, the PEP 8
    way to avoid keywords, is dropped (``from_`` -> ``from``).
    """
    stem = _stem(python_name)
    head, *rest = stem.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def python_name_for(json_name: str) -> str:
    """The snake_case name a JSON name maps back to: ``maxReplicas`` -> ``max_replicas``."""
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), json_name)


def _stem(python_name: str) -> str:
    if python_name.endswith("_") and not python_name.endswith("__") and len(python_name) > 1:
        return python_name[:-1]
    return python_name


def _short_name(cls: type) -> str:
    """The class name for messages, without ``<locals>`` noise."""
    return cls.__qualname__.rsplit("<locals>.", 1)[-1]


def _json_name_problems(cls: type[BaseModel]) -> list[str]:
    """Every way the JSON names of ``cls`` would not survive a round trip."""
    problems: list[str] = []
    seen: dict[str, str] = {}
    for name, info in cls.model_fields.items():
        where = f"{_short_name(cls)}.{name}"
        alias = info.alias
        if (
            not isinstance(alias, str)
            or info.validation_alias not in (None, alias)
            or info.serialization_alias not in (None, alias)
        ):
            problems.append(
                f"{where}: reads and writes different JSON names (validation_alias="
                f"{info.validation_alias!r}, serialization_alias={info.serialization_alias!r}), "
                "so a value read from the server would be written back under another key; "
                "declare one name with sp.field(json_name=...)"
            )
            continue
        if info.exclude:
            problems.append(
                f"{where}: is excluded from serialization, so its value would be dropped on "
                "every write; remove exclude=True (use a property for derived values)"
            )
        if not alias or any(ch.isspace() or ch in "./" for ch in alias):
            problems.append(
                f"{where}: JSON name {alias!r} is not a usable field name; choose a "
                "non-empty name without whitespace, '.' or '/' with sp.field(json_name=...)"
            )
        derived = info.alias_priority is None or info.alias_priority < 2
        if derived and python_name_for(alias) != _stem(name):
            problems.append(
                f"{where}: the JSON name {alias!r} derived from the Python name converts back "
                f"to {python_name_for(alias)!r}, not {name!r}, so the mapping is ambiguous; "
                "use a snake_case name whose parts start with a letter, or pass "
                f"sp.field(json_name={alias!r}) (or another name) to choose it explicitly"
            )
        if alias in seen:
            problems.append(
                f"{where}: JSON name {alias!r} is also used by {_short_name(cls)}.{seen[alias]}; "
                "one of the two would be lost; give them distinct names with "
                "sp.field(json_name=...)"
            )
        seen[alias] = name
    return problems


# --------------------------------------------------------------------------- models

SPELL_OUT_DEFAULTS = "setpoint.spell_out_defaults"
"""Serialization context key: write untouched non-empty defaults too.

Schema defaults of model-typed fields are written this way, because the API
server checks a default (including against CEL rules) before applying the
defaults nested inside it."""

COMPARE_VALUES = "setpoint.compare_values"
"""Serialization context key: drop every field whose value equals its default, assigned or
not, so that two objects holding the same values serialize alike (see :func:`semantic_json`)."""


def _is_empty_collection(value: Any) -> bool:
    return isinstance(value, list | dict | set | frozenset | tuple) and not value


class Model(BaseModel):
    """Base class for every typed part of an API object (specs, statuses, nested structs).

    Gives camelCase JSON names, keeps unknown fields through a round trip,
    omits unset fields on output, takes field documentation from attribute
    docstrings, and checks JSON names when the class is defined.
    """

    model_config = ConfigDict(
        extra="allow",
        alias_generator=json_name_for,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )

    # Per-class caches filled in __pydantic_init_subclass__; see _drop_unset.
    __setpoint_defaults__: ClassVar[dict[str, Any]] = {}
    __setpoint_nullable__: ClassVar[frozenset[str]] = frozenset()
    # CEL rules declared on this very class by decorating it with a Rule; see cel_rules_of.
    __setpoint_own_rules__: ClassVar[tuple[Rule, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        problems = _json_name_problems(cls)
        if problems:
            raise DeclarationError(
                f"{cls.__module__}.{cls.__qualname__} has fields whose JSON names would not "
                "round-trip:\n  " + "\n  ".join(problems)
            )
        defaults: dict[str, Any] = {}
        nullable: set[str] = set()
        for name, info in cls.model_fields.items():
            declared = field_schema_of(info)
            if declared is not None and declared.nullable:
                nullable.add(name)
            if info.default_factory is not None:
                if info.default_factory_takes_validated_data:
                    continue  # depends on other fields; never treated as "left at default"
                defaults[name] = cast(Callable[[], Any], info.default_factory)()
            elif info.default is not PydanticUndefined:
                defaults[name] = info.default
        cls.__setpoint_defaults__ = defaults
        cls.__setpoint_nullable__ = frozenset(nullable)

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            by_alias = True if info.by_alias is None else bool(info.by_alias)
            context = info.context
            spell_out = isinstance(context, Mapping) and bool(context.get(SPELL_OUT_DEFAULTS))
            compare = isinstance(context, Mapping) and bool(context.get(COMPARE_VALUES))
            self._drop_unset(
                data, by_alias=by_alias, spell_out_defaults=spell_out, values_only=compare
            )
            return self._finish_serialized(data)
        return data

    def _drop_unset(
        self,
        data: dict[str, Any],
        *,
        by_alias: bool,
        spell_out_defaults: bool = False,
        values_only: bool = False,
    ) -> None:
        """Drop unset fields: ``None`` (unless nullable and assigned) and untouched defaults.

        With ``spell_out_defaults`` untouched defaults stay, except empty collections:
        the form a schema default takes. With ``values_only`` a default value is dropped
        even when it was assigned (an assignment that changes nothing is no change).
        """
        cls = type(self)
        fields_set = self.model_fields_set
        defaults = cls.__setpoint_defaults__
        for name, info in cls.model_fields.items():
            key = (info.alias or name) if by_alias else name
            if key not in data:
                continue
            value = getattr(self, name)
            if value is None:
                if name not in cls.__setpoint_nullable__ or name not in fields_set:
                    del data[key]
            elif (values_only or name not in fields_set) and (
                name in defaults and value == defaults[name]
            ):
                # Never assigned and still equal to the default (an in-place append to a
                # default list makes it unequal, so that edit is written).
                if values_only or not spell_out_defaults or _is_empty_collection(value):
                    del data[key]
            elif isinstance(value, set | frozenset) and isinstance(data[key], list):
                # Set iteration order depends on hashing; write sets sorted so that reading
                # and writing back an unchanged object produces no diff.
                with contextlib.suppress(TypeError):  # items without an order stay as they are
                    data[key] = sorted(data[key])

    def _finish_serialized(self, data: dict[str, Any]) -> dict[str, Any]:
        """Hook for subclasses to adjust the serialized mapping (Resource adds apiVersion/kind)."""
        return data


def semantic_json(obj: Model) -> dict[str, Any]:
    """``obj``'s JSON form for comparing values: fields holding their default are left out.

    ``to_object()`` writes a field that was assigned its default value (the assignment
    marks it set), so an object that had it absent and one that had it assigned differ in
    JSON although they hold the same values. This form does not: the safe-write helpers
    use it to tell a mutation that changed nothing from one that did.
    """
    return dict(obj.model_dump(mode="json", by_alias=True, context={COMPARE_VALUES: True}))


# ObjectMeta and OwnerReference never contribute descriptions to a schema, so they skip
# pydantic's attribute-docstring extraction (source parsing), which dominated import time.
_NO_DOC_EXTRACTION = ConfigDict(use_attribute_docstrings=False)


class OwnerReference(Model):
    """A reference from a dependent object to its owner, used by garbage collection."""

    model_config = _NO_DOC_EXTRACTION

    api_version: str
    """API version of the owner, e.g. ``apps/v1``."""
    kind: str
    """Kind of the owner, e.g. ``Deployment``."""
    name: str
    """Name of the owner (in the dependent's namespace, or cluster-scoped)."""
    uid: str
    """UID of the owner; a reference to a deleted-and-recreated owner does not match."""
    controller: bool | None = None
    """This owner is the managing controller (at most one reference may say so)."""
    block_owner_deletion: bool | None = None
    """Foreground deletion of the owner waits for this dependent."""


class ObjectMeta(Model):
    """Standard object metadata (``metadata``). Unknown metadata fields also survive."""

    model_config = _NO_DOC_EXTRACTION

    name: str | None = None
    """Unique name within the namespace (or cluster, for cluster-scoped kinds)."""
    generate_name: str | None = None
    """Prefix the server uses to generate a unique name when ``name`` is unset."""
    namespace: str | None = None
    """Namespace of a namespaced object; unset for cluster-scoped objects."""
    uid: str | None = None
    """Server-assigned unique ID for this object's whole lifetime."""
    resource_version: str | None = None
    """Opaque version of this object, used for optimistic concurrency and watches."""
    generation: int | None = None
    """Increments whenever the spec changes (not status or metadata)."""
    creation_timestamp: datetime | None = None
    """When the object was created (set by the server)."""
    deletion_timestamp: datetime | None = None
    """When deletion was requested; the object waits for its finalizers until then."""
    deletion_grace_period_seconds: int | None = None
    """Seconds allowed for graceful termination once deletion was requested."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Identifying key/value pairs, used by selectors."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Non-identifying key/value data for tools and controllers."""
    finalizers: list[str] = Field(default_factory=list)
    """Keys that must be removed before the object is deleted."""
    owner_references: list[OwnerReference] = Field(default_factory=list)
    """Objects this one depends on; it is garbage collected when they are gone."""
    managed_fields: list[dict[str, Any]] = Field(default_factory=list)
    """Server-side apply field ownership, kept as raw JSON."""


class Resource(Model):
    """Base class for typed Kubernetes objects; satisfies :class:`setpoint.api.types.TypedObject`.

    Subclasses declare ``spec`` (and usually ``status``) fields and are
    declared with ``@sp.resource``. ``apiVersion`` and ``kind`` are not
    fields: they come from the declaration, are checked when parsing and are
    always written by :meth:`to_object`.
    """

    gvk: ClassVar[GroupVersionKind]
    """The declared group/version/kind (set by ``@sp.resource``)."""
    __setpoint_resource__: ClassVar[ResourceOptions]

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""

    @classmethod
    def __setpoint_declare__(cls, options: ResourceOptions) -> None:
        """Take ``options`` as this class's declaration (called by ``@sp.resource``).

        Raises:
            DeclarationError: the fields contradict the options (a field named ``kind`` or
                ``api_version``, a status subresource without a ``status`` field, a scale
                subresource without status).

        """
        where = f"{cls.__module__}.{cls.__qualname__}"
        for reserved in ("api_version", "kind"):
            if reserved in cls.model_fields:
                raise DeclarationError(
                    f"{where} declares a field {reserved!r}; apiVersion and kind come from "
                    "@resource(...), so remove the field"
                )
        if options.status_subresource and "status" not in cls.model_fields:
            raise DeclarationError(
                f"{where} enables the status subresource but declares no 'status' field; "
                "add `status: MyStatus | None = None` or drop status_subresource=True"
            )
        if options.scale is not None and not options.has_status(cls):
            raise DeclarationError(
                f"{where} declares a scale subresource without the status subresource; "
                "add a 'status' field (the scale status path reads from it)"
            )
        cls.__setpoint_resource__ = options
        cls.gvk = options.gvk

    @classmethod
    def declaration(cls) -> ResourceOptions:
        """The :class:`ResourceOptions` this class was declared with.

        Raises:
            DeclarationError: if the class (not just a base) was never declared with @resource.

        """
        options = cls.__dict__.get("__setpoint_resource__")
        if options is None:
            inherited = getattr(cls, "__setpoint_resource__", None)
            if inherited is None:
                raise DeclarationError(
                    f"{_short_name(cls)} has no @sp.resource(group=..., version=...) declaration; "
                    "decorate the class to give it an apiVersion and kind"
                )
            return cast(ResourceOptions, inherited)
        return cast(ResourceOptions, options)

    @classmethod
    def is_declared(cls) -> bool:
        """Whether this class itself carries a @resource declaration (not only a base)."""
        return "__setpoint_resource__" in cls.__dict__

    @classmethod
    def resource_info(cls) -> ResourceInfo:
        """Plural, scope and subresources, so clients and fakes need no discovery for this kind."""
        options = cls.declaration()
        subresources = set()
        if options.has_status(cls):
            subresources.add("status")
        if options.scale is not None:
            subresources.add("scale")
        return ResourceInfo(
            gvk=options.gvk,
            plural=options.resolved_plural,
            namespaced=options.resolved_scope == "Namespaced",
            subresources=frozenset(subresources),
            singular=options.resolved_singular,
            short_names=options.resolved_short_names,
        )

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Parse the JSON form sent by the API server; unknown fields are kept.

        Only JSON names are read (``maxReplicas``, never ``max_replicas``), so a
        snake_case key in the input stays an unknown field instead of being
        mistaken for a declared one. Nested unknown values are not copied:
        hand in a mapping the object may own.

        Raises:
            pydantic.ValidationError: if a value has the wrong type, or
                apiVersion/kind name another type.

        """
        return cls.model_validate(obj, by_alias=True, by_name=False)

    def to_object(self) -> dict[str, Any]:
        """Serialize to the JSON form: apiVersion, kind, metadata, fields; unset fields omitted."""
        out = self.model_dump(mode="json", by_alias=True)
        if "metadata" not in out:
            # Every API object has metadata, even before it has a name (generateName).
            head: dict[str, Any] = {k: out.pop(k) for k in ("apiVersion", "kind") if k in out}
            out = {**head, "metadata": {}, **out}
        return out

    @model_validator(mode="before")
    @classmethod
    def _check_type_meta(cls, data: Any) -> Any:
        # apiVersion and kind are not fields; check they name this class, then drop them so
        # they do not land among the unknown fields and get written twice.
        if not isinstance(data, Mapping) or ("apiVersion" not in data and "kind" not in data):
            return data
        options = getattr(cls, "__setpoint_resource__", None)
        if options is None:
            return data  # an undeclared base: keep apiVersion/kind as unknown fields
        gvk = cast(ResourceOptions, options).gvk
        api_version, kind = data.get("apiVersion"), data.get("kind")
        if (api_version is not None and api_version != gvk.api_version) or (
            kind is not None and kind != gvk.kind
        ):
            raise ValueError(
                f"{_short_name(cls)} parses {gvk.api_version} {gvk.kind} objects, but got "
                f"apiVersion={api_version!r} kind={kind!r}; use the class declared for that "
                "version (or read it as a plain dict)"
            )
        return {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}

    def _finish_serialized(self, data: dict[str, Any]) -> dict[str, Any]:
        options = getattr(type(self), "__setpoint_resource__", None)
        out: dict[str, Any] = {}
        if options is not None:
            gvk = cast(ResourceOptions, options).gvk
            out.update(apiVersion=gvk.api_version, kind=gvk.kind)
        if "metadata" in data:
            out["metadata"] = data.pop("metadata")
        out.update(data)
        return out
