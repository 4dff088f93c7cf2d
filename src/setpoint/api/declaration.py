"""Declaring an API: what a CRD says about fields and about each version of a kind.

The declaration data, kept apart from the runtime models of :mod:`setpoint.api.resource`:

* field level: :func:`field` and :class:`FieldSchema` (the equivalent of kubebuilder's
  validation markers), CEL :class:`Rule` s, :data:`Quantity`, and :class:`Constraint`
  for allOf/anyOf/oneOf/not (also on a whole model: :func:`exactly_one_of`,
  :func:`at_most_one_of`);
* kind level: :func:`resource` / :class:`ResourceOptions` (group, version, names, scope,
  subresources, printer columns, storage version), with :class:`PrinterColumn` and
  :class:`Scale`, and the naming helpers :func:`default_plural` and
  :func:`version_priority`.

:mod:`setpoint.crd` turns these into CustomResourceDefinition manifests; the models only
carry them. A mistake is a :class:`DeclarationError` (or a ``ValueError`` for one bad
argument) when the class is defined, never a rejected CRD later.

This module imports only pydantic and :mod:`setpoint.api`; it never imports the models.
Decorators reach a class through hooks it carries: :class:`Rule` needs a class with
``__setpoint_own_rules__`` (every setpoint ``Model``), :func:`resource` a class with
``__setpoint_declare__`` (every ``Resource``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from typing import Annotated, Any, Literal, TypeAlias, TypeVar, cast

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.validation import is_dns1035_label, is_dns1123_subdomain

__all__ = [
    "Constraint",
    "DeclarationError",
    "FieldSchema",
    "IntOrString",
    "PrinterColumn",
    "Quantity",
    "ResourceOptions",
    "Rule",
    "Scale",
    "at_most_one_of",
    "cel_rules_of",
    "constraints_of",
    "default_plural",
    "exactly_one_of",
    "field",
    "field_schema_of",
    "resource",
    "version_priority",
]

IntOrString: TypeAlias = int | str
"""An integer or a string (``x-kubernetes-int-or-string``), like a port or ``"50%"``."""

ListType: TypeAlias = Literal["atomic", "set", "map"]
MapType: TypeAlias = Literal["atomic", "granular"]
Scope: TypeAlias = Literal["Namespaced", "Cluster"]
ValidationReason: TypeAlias = Literal[
    "FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"
]
ColumnType: TypeAlias = Literal["integer", "number", "string", "boolean", "date"]
ColumnFormat: TypeAlias = Literal[
    "int32", "int64", "float", "double", "byte", "date", "date-time", "password"
]

_M = TypeVar("_M", bound=type)
_R = TypeVar("_R", bound=type)

# Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation).


class DeclarationError(SetpointError, TypeError):
    """A resource, model or field declaration that setpoint cannot turn into a correct API.

    Raised when the class is defined (or decorated), so mistakes surface at
    import time rather than as a rejected CRD or a silently dropped field.
    The message names the class and field and says how to fix it.
    """

    __module__ = "setpoint"


# --------------------------------------------------------------------------- field declarations

_MISSING: Any = PydanticUndefined


@dataclass(frozen=True)
class Rule:
    """A CEL validation rule (``x-kubernetes-validations``), checked by the API server.

    Attach it to a field with ``sp.field(rules=[sp.Rule(...)])`` (``self`` is
    the field's value) or to a whole model by decorating the class with it
    (``self`` is the object)::

        @sp.Rule("self.min <= self.max", message="min must not exceed max")
        class Range(sp.Model):
            min: int
            max: int
    """

    rule: str
    """The CEL expression; the object is valid when it evaluates to true."""
    _: KW_ONLY
    message: str | None = None
    """The error message shown when the rule fails (one line). Default: the server generates one."""
    message_expression: str | None = None
    """A CEL expression producing the message, evaluated on failure. Default: none."""
    field_path: str | None = None
    """Where the error points, relative to the rule's node (``.max``). Default: the node."""
    reason: ValidationReason | None = None
    """Machine-readable reason for the failure. Default: the server uses ``FieldValueInvalid``."""
    optional_old_self: bool | None = None
    """Run transition rules (``oldSelf``) on create too, with ``oldSelf`` unset. Default: unset."""

    def __post_init__(self) -> None:
        if not self.rule.strip():
            raise ValueError("Rule.rule is empty: write the CEL expression that must hold")
        if self.message is not None and (not self.message.strip() or _has_newline(self.message)):
            raise ValueError(
                f"Rule({self.rule!r}).message must be a non-empty single line; "
                "the API server rejects messages with line breaks"
            )
        if _has_newline(self.rule) and not (self.message or "").strip():
            raise ValueError(
                f"Rule({self.rule!r}) spans several lines, so the API server requires a message"
            )
        if self.field_path is not None and (
            not self.field_path.strip() or _has_newline(self.field_path)
        ):
            raise ValueError(
                f"Rule({self.rule!r}).field_path must be a non-empty single-line path like '.max'"
            )

    def to_schema(self) -> dict[str, Any]:
        """The ``x-kubernetes-validations`` entry for this rule."""
        out: dict[str, Any] = {"rule": self.rule}
        if self.message is not None:
            out["message"] = self.message
        if self.message_expression is not None:
            out["messageExpression"] = self.message_expression
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        if self.reason is not None:
            out["reason"] = self.reason
        if self.optional_old_self is not None:
            out["optionalOldSelf"] = self.optional_old_self
        return out

    def __call__(self, cls: _M) -> _M:
        """Attach this rule to a model class (used as a class decorator)."""
        # Every setpoint Model (and no other class) carries __setpoint_own_rules__.
        if not (
            isinstance(cls, type)
            and issubclass(cls, BaseModel)
            and hasattr(cls, "__setpoint_own_rules__")
        ):
            raise DeclarationError(
                f"Rule({self.rule!r}) decorates {cls!r}, which is not a setpoint Model; "
                "decorate a class deriving from sp.Model or sp.Resource"
            )
        own: tuple[Rule, ...] = cls.__dict__.get("__setpoint_own_rules__", ())
        # Decorators apply bottom-up; prepending keeps the rules in source order.
        type.__setattr__(cls, "__setpoint_own_rules__", (self, *own))
        return cls


@dataclass(frozen=True, kw_only=True)
class Constraint:
    """Value validations for one branch of ``allOf``/``anyOf``/``oneOf``/``not``.

    The API server's structural-schema rules allow only value validations inside these
    junctors: no type, default, description, nullable or ``x-kubernetes-*`` keyword, and
    only properties and items the field's own type declares. A Constraint holds exactly
    the keywords that are allowed, so whatever it says is a schema the server accepts.

    On a field: ``sp.field(one_of=[sp.Constraint(format="ipv4"), sp.Constraint(format="ipv6")])``.
    On a whole model, as a class decorator (``self`` is the object)::

        @sp.Constraint(one_of=(sp.Constraint(required=("image",)),
                               sp.Constraint(required=("build",))))
        class Source(sp.Model):       # exactly one of image and build
            image: str | None = None
            build: Build | None = None

    :func:`exactly_one_of` and :func:`at_most_one_of` build the common ones. Field names
    (in ``required`` and ``properties``) may be Python or JSON names; a name the type
    does not declare is an error when the CRD is generated, as is a ``format`` the server
    does not check (it would silently strip it). Every attribute defaults to "not declared".
    """

    required: Sequence[str] = ()
    """Fields that must be present (``required``)."""
    minimum: float | None = None
    """Smallest allowed number."""
    maximum: float | None = None
    """Largest allowed number."""
    exclusive_minimum: bool = False
    """The number must be strictly greater than ``minimum``."""
    exclusive_maximum: bool = False
    """The number must be strictly less than ``maximum``."""
    multiple_of: float | None = None
    """The number must be a multiple of this."""
    min_length: int | None = None
    """Shortest allowed string, in characters."""
    max_length: int | None = None
    """Longest allowed string, in characters."""
    pattern: str | None = None
    """Regular expression (RE2 syntax, unanchored) the string must match."""
    format: str | None = None
    """A format the server checks: ``ipv4``, ``ipv6``, ``cidr``, ``mac``, ``uri``,
    ``hostname``, ``email``, ``uuid``, ``date``, ``date-time``, ``duration``, ``byte``...;
    ``int32``/``int64`` for integers, ``float``/``double`` for numbers."""
    enum: Sequence[Any] | None = None
    """The allowed values."""
    min_items: int | None = None
    """Fewest list items."""
    max_items: int | None = None
    """Most list items."""
    min_properties: int | None = None
    """Fewest keys in a map or object."""
    max_properties: int | None = None
    """Most keys in a map or object."""
    properties: Mapping[str, Constraint] | Sequence[tuple[str, Constraint]] = ()
    """Constraints on fields of the object, as ``(name, Constraint)`` pairs (a mapping is
    accepted too)."""
    items: Constraint | None = None
    """A constraint on every item of the list."""
    all_of: Sequence[Constraint] = ()
    """The value must satisfy every one of these."""
    any_of: Sequence[Constraint] = ()
    """The value must satisfy at least one of these."""
    one_of: Sequence[Constraint] = ()
    """The value must satisfy exactly one of these."""
    not_: Constraint | None = None
    """The value must not satisfy this."""

    def __post_init__(self) -> None:
        properties = self.properties
        pairs = tuple(properties.items()) if isinstance(properties, Mapping) else tuple(properties)
        object.__setattr__(self, "properties", pairs)
        for name in ("required", "enum", "all_of", "any_of", "one_of"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"Constraint {name}= takes a sequence, not the string {value!r}")
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        FieldSchema(
            minimum=self.minimum,
            maximum=self.maximum,
            exclusive_minimum=self.exclusive_minimum,
            exclusive_maximum=self.exclusive_maximum,
            multiple_of=self.multiple_of,
            min_length=self.min_length,
            max_length=self.max_length,
            pattern=self.pattern,
            enum=tuple(self.enum) if self.enum is not None else None,
            min_items=self.min_items,
            max_items=self.max_items,
            min_properties=self.min_properties,
            max_properties=self.max_properties,
        )  # the same argument checks as sp.field's
        for name in ("all_of", "any_of", "one_of"):
            branches = getattr(self, name)
            if any(not isinstance(b, Constraint) for b in branches):
                raise ValueError(f"Constraint {name}= takes Constraint values")
        if not self.to_schema():
            raise ValueError("Constraint() declares nothing; give it at least one validation")

    def to_schema(self) -> dict[str, Any]:
        """The schema keywords of this constraint, field names as declared.

        The CRD generator then turns Python field names into JSON names against the
        node the constraint applies to, and checks every name and format.
        """
        out: dict[str, Any] = {}
        for attr, key in _CONSTRAINT_KEYWORDS:
            value = getattr(self, attr)
            if value is None or value is False or value == ():
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        if self.required:
            out["required"] = list(self.required)
        pairs = cast("tuple[tuple[str, Constraint], ...]", self.properties)  # see __post_init__
        if pairs:
            out["properties"] = {n: c.to_schema() for n, c in pairs}
        if self.items is not None:
            out["items"] = self.items.to_schema()
        for attr, key in (("all_of", "allOf"), ("any_of", "anyOf"), ("one_of", "oneOf")):
            branches = getattr(self, attr)
            if branches:
                out[key] = [b.to_schema() for b in branches]
        if self.not_ is not None:
            out["not"] = self.not_.to_schema()
        return out

    def __call__(self, cls: _M) -> _M:
        """Attach this constraint to a model class (used as a class decorator)."""
        if not (
            isinstance(cls, type)
            and issubclass(cls, BaseModel)
            and hasattr(cls, "__setpoint_own_rules__")
        ):
            raise DeclarationError(
                f"Constraint decorates {cls!r}, which is not a setpoint Model; "
                "decorate a class deriving from sp.Model or sp.Resource"
            )
        own: tuple[Constraint, ...] = cls.__dict__.get("__setpoint_own_constraints__", ())
        type.__setattr__(cls, "__setpoint_own_constraints__", (self, *own))
        return cls


_CONSTRAINT_KEYWORDS = (
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("exclusive_minimum", "exclusiveMinimum"),
    ("exclusive_maximum", "exclusiveMaximum"),
    ("multiple_of", "multipleOf"),
    ("min_length", "minLength"),
    ("max_length", "maxLength"),
    ("pattern", "pattern"),
    ("format", "format"),
    ("enum", "enum"),
    ("min_items", "minItems"),
    ("max_items", "maxItems"),
    ("min_properties", "minProperties"),
    ("max_properties", "maxProperties"),
)


def exactly_one_of(*fields: str) -> Constraint:
    """A model constraint: exactly one of ``fields`` is set (a ``oneOf`` of ``required``).

    Use as a class decorator: ``@sp.exactly_one_of("image", "build")``. A field with a
    schema default counts as set once defaulted, so give these fields no default but None.
    """
    if len(fields) < 2:
        raise ValueError("exactly_one_of needs at least two field names")
    return Constraint(one_of=tuple(Constraint(required=(f,)) for f in fields))


def at_most_one_of(*fields: str) -> Constraint:
    """A model constraint: at most one of ``fields`` is set (``not`` any two together)."""
    if len(fields) < 2:
        raise ValueError("at_most_one_of needs at least two field names")
    pairs = [(a, b) for i, a in enumerate(fields) for b in fields[i + 1 :]]
    if len(pairs) == 1:
        return Constraint(not_=Constraint(required=pairs[0]))
    return Constraint(not_=Constraint(any_of=tuple(Constraint(required=p) for p in pairs)))


def constraints_of(cls: type[BaseModel]) -> tuple[Constraint, ...]:
    """The constraints declared on a model class and its bases (bases first)."""
    found: list[Constraint] = []
    for klass in reversed(cls.__mro__):
        found.extend(klass.__dict__.get("__setpoint_own_constraints__", ()))
    return tuple(found)


def _has_newline(text: str) -> bool:
    return "\n" in text or "\r" in text


def cel_rules_of(cls: type[BaseModel]) -> tuple[Rule, ...]:
    """The CEL rules declared on a model class and its bases (bases first)."""
    rules: list[Rule] = []
    for klass in reversed(cls.__mro__):
        rules.extend(klass.__dict__.get("__setpoint_own_rules__", ()))
    return tuple(rules)


@dataclass(frozen=True, kw_only=True)
class FieldSchema:
    """Schema declarations for one field, the equivalent of kubebuilder's validation markers.

    Usually built by :func:`field`; it can also annotate a nested type directly,
    for example the items of a list: ``list[Annotated[str, sp.field(max_length=63)]]``.
    Every attribute defaults to "not declared".
    """

    minimum: float | None = None
    """Smallest allowed number (``minimum``)."""
    maximum: float | None = None
    """Largest allowed number (``maximum``)."""
    exclusive_minimum: bool = False
    """The value must be strictly greater than ``minimum``."""
    exclusive_maximum: bool = False
    """The value must be strictly less than ``maximum``."""
    multiple_of: float | None = None
    """The number must be a multiple of this (``multipleOf``)."""
    min_length: int | None = None
    """Shortest allowed string, in characters."""
    max_length: int | None = None
    """Longest allowed string; also bounds the cost of CEL rules over it."""
    pattern: str | None = None
    """Regular expression (RE2 syntax, unanchored) the string must match."""
    format: str | None = None
    """OpenAPI format such as ``date-time``, ``uri``, ``uuid``, ``int32``."""
    enum: tuple[Any, ...] | None = None
    """The allowed values. ``Literal[...]`` and ``enum.Enum`` types declare this themselves."""
    min_items: int | None = None
    """Fewest list items."""
    max_items: int | None = None
    """Most list items; also bounds the cost of CEL rules over the list."""
    unique_items: bool = False
    """Items must be distinct; emitted as ``x-kubernetes-list-type: set`` because the API
    server forbids ``uniqueItems`` (its check is quadratic)."""
    min_properties: int | None = None
    """Fewest keys in a map or object."""
    max_properties: int | None = None
    """Most keys in a map or object."""
    nullable: bool = False
    """``null`` is a stored value: an explicit ``None`` is written as ``null`` instead of
    being omitted, and the server keeps it instead of pruning it."""
    rules: tuple[Rule, ...] = ()
    """CEL rules over this field's value (``self``)."""
    preserve_unknown_fields: bool = False
    """Keep fields the schema does not declare (``x-kubernetes-preserve-unknown-fields``)."""
    embedded_resource: bool = False
    """The value is a whole Kubernetes object with apiVersion, kind and metadata
    (``x-kubernetes-embedded-resource``). Implied for fields typed with a Resource class."""
    list_type: ListType | None = None
    """How lists merge in server-side apply: ``atomic`` (default), ``set`` or ``map``."""
    list_map_keys: tuple[str, ...] = ()
    """Item fields identifying an entry of a ``map`` list (Python or JSON names). Implies
    ``list_type="map"``."""
    map_type: MapType | None = None
    """How objects and maps merge in server-side apply: ``granular`` (default) or ``atomic``."""
    title: str | None = None
    """Short title shown by schema tools."""
    example: Any = None
    """An example value shown by schema tools (``None`` means no example)."""
    all_of: tuple[Constraint, ...] = ()
    """The value must satisfy every one of these (``allOf``; :class:`Constraint`)."""
    any_of: tuple[Constraint, ...] = ()
    """The value must satisfy at least one of these (``anyOf``)."""
    one_of: tuple[Constraint, ...] = ()
    """The value must satisfy exactly one of these (``oneOf``)."""
    not_: Constraint | None = None
    """The value must not satisfy this (``not``)."""

    def __post_init__(self) -> None:
        if self.exclusive_minimum and self.minimum is None:
            raise ValueError("exclusive_minimum=True needs minimum= to be set")
        if self.exclusive_maximum and self.maximum is None:
            raise ValueError("exclusive_maximum=True needs maximum= to be set")
        for name in ("min_length", "max_length", "min_items", "max_items"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name}={value} is negative; limits count from 0")
        for low, high in (
            ("minimum", "maximum"),
            ("min_length", "max_length"),
            ("min_items", "max_items"),
            ("min_properties", "max_properties"),
        ):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"{low}={lo} is greater than {high}={hi}; no value could pass")
        if self.multiple_of is not None and self.multiple_of <= 0:
            raise ValueError(f"multiple_of={self.multiple_of} must be positive")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(
                    f"pattern {self.pattern!r} is not a regular expression: {exc}"
                ) from exc
        if self.list_map_keys and self.list_type not in (None, "map"):
            raise ValueError(
                f"list_map_keys={list(self.list_map_keys)} needs list_type='map', "
                f"not {self.list_type!r}"
            )
        if self.list_type == "map" and not self.list_map_keys:
            raise ValueError("list_type='map' needs list_map_keys= naming the item key fields")
        if self.unique_items and self.list_type not in (None, "set"):
            raise ValueError(
                f"unique_items=True means list_type='set'; it conflicts with "
                f"list_type={self.list_type!r}"
            )
        if self.enum is not None and not self.enum:
            raise ValueError("enum=() allows no value at all; list the allowed values")


def field(
    default: Any = _MISSING,
    *,
    default_factory: Callable[[], Any] | None = None,
    json_name: str | None = None,
    description: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    multiple_of: float | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    format: str | None = None,
    enum: Sequence[Any] | None = None,
    min_items: int | None = None,
    max_items: int | None = None,
    unique_items: bool = False,
    min_properties: int | None = None,
    max_properties: int | None = None,
    nullable: bool = False,
    rules: Sequence[Rule] = (),
    preserve_unknown_fields: bool = False,
    embedded_resource: bool = False,
    list_type: ListType | None = None,
    list_map_keys: Sequence[str] = (),
    map_type: MapType | None = None,
    title: str | None = None,
    example: Any = None,
    all_of: Sequence[Constraint] = (),
    any_of: Sequence[Constraint] = (),
    one_of: Sequence[Constraint] = (),
    not_: Constraint | None = None,
) -> Any:
    """Declare a model field with its JSON name, default and schema constraints.

    Use it as the field's default (``replicas: int = sp.field(default=1, minimum=0)``)
    or inside ``Annotated`` for nested types. Constraint arguments are those of
    :class:`FieldSchema`.

    ``default`` (or ``default_factory``) is both the Python default and the
    server-side default in the CRD schema, so every client sees the same
    value for an omitted field. Empty list and dict defaults are not written
    into the schema: in Kubernetes an absent collection already means empty.
    A field with neither is required, unless its type allows ``None`` and its
    default is ``None`` (then it is optional and absent means unset).

    ``description`` defaults to the attribute docstring written under the
    field, which is the recommended place for field documentation.

    Raises:
        ValueError: for contradictory constraints, naming the two arguments.

    """
    schema = FieldSchema(
        minimum=minimum,
        maximum=maximum,
        exclusive_minimum=exclusive_minimum,
        exclusive_maximum=exclusive_maximum,
        multiple_of=multiple_of,
        min_length=min_length,
        max_length=max_length,
        pattern=pattern,
        format=format,
        enum=tuple(enum) if enum is not None else None,
        min_items=min_items,
        max_items=max_items,
        unique_items=unique_items,
        min_properties=min_properties,
        max_properties=max_properties,
        nullable=nullable,
        rules=tuple(rules),
        preserve_unknown_fields=preserve_unknown_fields,
        embedded_resource=embedded_resource,
        list_type=list_type,
        list_map_keys=tuple(list_map_keys),
        map_type=map_type,
        title=title,
        example=example,
        all_of=tuple(all_of),
        any_of=tuple(any_of),
        one_of=tuple(one_of),
        not_=not_,
    )
    if default is not _MISSING and default_factory is not None:
        raise ValueError("field() takes default= or default_factory=, not both")
    kwargs: dict[str, Any] = {}
    if json_name is not None:
        kwargs["alias"] = json_name
    if description is not None:
        kwargs["description"] = description
    info: FieldInfo = (
        Field(default_factory=default_factory, **kwargs)
        if default_factory is not None
        else Field(default, **kwargs)
    )
    info.metadata.append(schema)
    return info


def field_schema_of(info: FieldInfo) -> FieldSchema | None:
    """The :class:`FieldSchema` declared on a pydantic field, if any (the last one wins)."""
    found: FieldSchema | None = None
    for item in info.metadata:
        if isinstance(item, FieldSchema):
            found = item
    return found


_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

Quantity: TypeAlias = Annotated[int | str, field(pattern=_QUANTITY_PATTERN)]
"""A Kubernetes resource quantity such as ``500m``, ``2Gi`` or ``3``: an int-or-string
with the API server's quantity pattern."""


# --------------------------------------------------------------------------- resource declaration


@dataclass(frozen=True, kw_only=True)
class PrinterColumn:
    """An additional column for ``kubectl get`` (``additionalPrinterColumns``)."""

    name: str
    """Column header."""
    json_path: str
    """Simple JSON path from the object root, e.g. ``.status.phase``."""
    type: ColumnType = "string"
    """Value type: integer, number, string, boolean or date."""
    format: ColumnFormat | None = None
    """Optional format hint, e.g. ``date-time`` or ``int32``. Default: none."""
    description: str | None = None
    """Human-readable description of the column. Default: none."""
    priority: int = 0
    """0 shows the column by default; higher priorities show only with ``-o wide``."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("PrinterColumn.name is empty: give the column a header")
        if not self.json_path.startswith("."):
            raise ValueError(
                f"PrinterColumn {self.name!r}: json_path {self.json_path!r} must start with '.', "
                "e.g. '.status.phase'"
            )
        if self.priority < 0:
            raise ValueError(f"PrinterColumn {self.name!r}: priority must be >= 0")

    def to_manifest(self) -> dict[str, Any]:
        """The ``additionalPrinterColumns`` entry."""
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.format is not None:
            out["format"] = self.format
        if self.description is not None:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True, kw_only=True)
class Scale:
    """The scale subresource: lets ``kubectl scale`` and autoscalers change replicas."""

    spec_replicas_path: str = ".spec.replicas"
    """Where the desired replica count lives (must be under ``.spec``)."""
    status_replicas_path: str = ".status.replicas"
    """Where the observed replica count lives (must be under ``.status``)."""
    label_selector_path: str | None = None
    """Where a string label selector lives, needed by the HorizontalPodAutoscaler. Default: none."""

    def __post_init__(self) -> None:
        if not self.spec_replicas_path.startswith(".spec."):
            raise ValueError(
                f"Scale.spec_replicas_path {self.spec_replicas_path!r} must be under .spec, "
                "e.g. '.spec.replicas'"
            )
        if not self.status_replicas_path.startswith(".status."):
            raise ValueError(
                f"Scale.status_replicas_path {self.status_replicas_path!r} must be under "
                ".status, e.g. '.status.replicas'"
            )
        if self.label_selector_path is not None and not self.label_selector_path.startswith(
            (".spec.", ".status.")
        ):
            raise ValueError(
                f"Scale.label_selector_path {self.label_selector_path!r} must be under .spec "
                "or .status, e.g. '.status.selector'"
            )

    def to_manifest(self) -> dict[str, Any]:
        """The ``subresources.scale`` entry."""
        out = {
            "specReplicasPath": self.spec_replicas_path,
            "statusReplicasPath": self.status_replicas_path,
        }
        if self.label_selector_path is not None:
            out["labelSelectorPath"] = self.label_selector_path
        return out


_KUBE_VERSION = re.compile(r"v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key ordering versions as the API server does: GA, beta, alpha, newest first.

    ``v2 < v1 < v2beta1 < v1beta2 < v1alpha1 < foo`` (other names last, alphabetically).
    """
    match = _KUBE_VERSION.fullmatch(version)
    if match is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0), version)


def default_plural(word: str) -> str:
    """English plural of a lower-case kind, as kubebuilder derives resource names (``policies``)."""
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


@dataclass(frozen=True, kw_only=True)
class ResourceOptions:
    """How a :class:`Resource` subclass is served: the CRD-level declarations for one version.

    Build it with :func:`resource` and apply it as a class decorator. Names
    not given are derived from the kind the way kubebuilder does. For a kind
    with several versions (one class each), the CRD-wide settings (scope,
    plural, singular, short names, categories, list kind) need to be declared
    on one version only; the others take them from it (:meth:`crd_wide`), and
    versions that declare them must agree.
    """

    group: str
    """API group, a DNS subdomain with at least one dot (``demo.setpoint.dev``)."""
    version: str
    """API version of this class (``v1``, ``v1alpha1``)."""
    kind: str | None = None
    """Kind name. Default: the class name."""
    scope: Scope | None = None
    """``Namespaced`` or ``Cluster``. Default: ``Namespaced``."""
    plural: str | None = None
    """Resource name in URLs. Default: the lower-cased kind, pluralized (``widgets``)."""
    singular: str | None = None
    """Singular resource name. Default: the lower-cased kind."""
    short_names: Sequence[str] | None = None
    """Abbreviations for kubectl (``["wd"]``). Default: none."""
    categories: Sequence[str] | None = None
    """Groups for ``kubectl get <category>`` (``["all"]``). Default: none."""
    list_kind: str | None = None
    """Kind of list responses. Default: kind + ``List``."""
    status_subresource: bool | None = None
    """Serve ``status`` as a subresource (spec writes ignore status and vice versa).
    Default (``None``): on exactly when the class declares a ``status`` field."""
    scale: Scale | None = None
    """The scale subresource. Default: not served."""
    printer_columns: Sequence[PrinterColumn] = ()
    """Extra ``kubectl get`` columns for this version. Default: none."""
    selectable_fields: Sequence[str] = ()
    """JSON paths usable in field selectors (``.spec.color``). Default: none."""
    served: bool = True
    """This version is served by the API."""
    storage: bool = False
    """This is the version objects are stored in. Exactly one version of a kind is;
    a kind with a single version needs no flag."""
    deprecated: bool = False
    """This version is deprecated: clients get a warning header."""
    deprecation_warning: str | None = None
    """The warning text for a deprecated version (at most 256 printable characters).
    Default: the server's generic warning."""

    def __post_init__(self) -> None:
        if not is_dns1123_subdomain(self.group) or "." not in self.group:
            raise ValueError(
                f"group {self.group!r} must be a lower-case DNS subdomain with at least one dot, "
                "e.g. 'demo.example.com'"
            )
        if not is_dns1035_label(self.version):
            raise ValueError(
                f"version {self.version!r} must be a DNS label starting with a letter, e.g. 'v1'"
            )
        if self.kind is not None:
            _check_kind(self.kind, "kind")
        if self.list_kind is not None:
            _check_kind(self.list_kind, "list_kind")
        for name in ("plural", "singular"):
            value = getattr(self, name)
            if value is not None:
                _check_label(value, name)
        for name in ("short_names", "categories"):
            values = getattr(self, name)
            if values is not None:
                if isinstance(values, str):
                    raise ValueError(f"{name} must be a list of names, not the string {values!r}")
                object.__setattr__(self, name, tuple(values))
                for value in values:
                    _check_label(value, name)
        object.__setattr__(self, "printer_columns", tuple(self.printer_columns))
        object.__setattr__(self, "selectable_fields", tuple(self.selectable_fields))
        for path in self.selectable_fields:
            if not path.startswith(".") or path.startswith(".metadata"):
                raise ValueError(
                    f"selectable field {path!r} must be a JSON path outside metadata, "
                    "e.g. '.spec.color'"
                )
        if self.deprecation_warning is not None:
            if not self.deprecated:
                raise ValueError("deprecation_warning is only allowed with deprecated=True")
            text = self.deprecation_warning
            if not text or len(text) > 256 or not text.isprintable():
                raise ValueError(
                    "deprecation_warning must be 1 to 256 printable characters on one line"
                )
        if self.storage and not self.served:
            raise ValueError(
                f"version {self.version!r} is the storage version but not served; "
                "serve it (served=True) or store another version"
            )

    # Resolved names ---------------------------------------------------------

    @property
    def resolved_kind(self) -> str:
        """The kind (set once the options are applied to a class)."""
        if self.kind is None:
            raise DeclarationError("ResourceOptions.kind is unresolved: apply it to a class first")
        return self.kind

    def crd_wide(self, name: str) -> Any:
        """A CRD-wide setting: as declared here, else as another version of the kind declares it.

        ``None`` when no declared version of the kind sets it. Versions are
        consulted newest first (Kubernetes version priority).
        """
        own = getattr(self, name)
        if own is not None or self.kind is None:
            return own
        siblings = _KIND_VERSIONS.get((self.group, self.kind), {})
        for version in sorted(siblings, key=version_priority):
            value = getattr(siblings[version], name)
            if value is not None:
                return value
        return None

    @property
    def resolved_scope(self) -> Scope:
        """The scope: declared (here or on another version), else ``Namespaced``."""
        scope: Scope = self.crd_wide("scope") or "Namespaced"
        return scope

    @property
    def resolved_plural(self) -> str:
        """The plural: declared (here or on another version), else derived from the kind."""
        return self.crd_wide("plural") or default_plural(self.resolved_kind.lower())

    @property
    def resolved_singular(self) -> str:
        """The singular: declared (here or on another version), else the lower-cased kind."""
        return self.crd_wide("singular") or self.resolved_kind.lower()

    @property
    def resolved_list_kind(self) -> str:
        """The list kind: declared (here or on another version), else kind + ``List``."""
        return self.crd_wide("list_kind") or f"{self.resolved_kind}List"

    @property
    def resolved_short_names(self) -> tuple[str, ...]:
        """The short names: declared (here or on another version), else none."""
        return tuple(self.crd_wide("short_names") or ())

    @property
    def gvk(self) -> GroupVersionKind:
        """The group/version/kind these options declare."""
        return GroupVersionKind(self.group, self.version, self.resolved_kind)

    def __call__(self, cls: _R) -> _R:
        """Declare ``cls`` as this resource version (used as a class decorator).

        The class accepts the declaration through its ``__setpoint_declare__`` hook
        (:class:`~setpoint.api.resource.Resource` has it), which checks its fields against
        these options and stores them.
        """
        accept: Callable[[ResourceOptions], None] | None = (
            getattr(cls, "__setpoint_declare__", None) if isinstance(cls, type) else None
        )
        if accept is None:
            raise DeclarationError(
                f"@resource(group={self.group!r}, version={self.version!r}) decorates {cls!r}, "
                "which is not a Resource; derive the class from sp.Resource"
            )
        options = self if self.kind is not None else replace(self, kind=cls.__name__)
        accept(options)
        _KIND_VERSIONS.setdefault((options.group, options.resolved_kind), {})[options.version] = (
            options
        )
        return cls

    def has_status(self, cls: type[BaseModel]) -> bool:
        """Whether ``cls`` (declared with these options) serves the status subresource."""
        if self.status_subresource is None:
            return "status" in cls.model_fields
        return self.status_subresource


def _check_kind(value: str, what: str) -> None:
    # The API server's rule: the lower-cased kind is a DNS-1035 label.
    if not is_dns1035_label(value.lower()):
        raise ValueError(
            f"{what} {value!r} must be a CamelCase name of letters and digits, e.g. 'Widget'"
        )


def _check_label(value: str, what: str) -> None:
    if not is_dns1035_label(value):
        raise ValueError(
            f"{what} entry {value!r} must be a lower-case DNS label (letters, digits, '-', "
            "starting with a letter)"
        )


# (group, kind) -> version -> options of every declared class, for CRD-wide settings that
# one version declares for all (ResourceOptions.crd_wide). Re-declaring a version replaces it.
_KIND_VERSIONS: dict[tuple[str, str], dict[str, ResourceOptions]] = {}

resource = ResourceOptions
"""Declare a :class:`Resource` subclass: ``@sp.resource(group=..., version=..., ...)``.

An alias of :class:`ResourceOptions`, whose attributes document every argument."""
