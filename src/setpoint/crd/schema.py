"""Python types -> OpenAPI v3 structural schema, the way controller-gen does it for Go.

The walk reads the pydantic field declarations of :class:`setpoint.Model` and
:class:`setpoint.Resource` classes and produces a self-contained schema: no
``$ref``, every node typed, CRD extensions (``x-kubernetes-*``) where declared.
Every problem found is collected with the Python ``Class.field`` it came from,
instead of stopping at the first.

Type mapping:

=================================  =============================================
Python                             schema
=================================  =============================================
``str`` / ``int`` / ``float``      ``string`` / ``integer`` / ``number``
``bool``                           ``boolean``
``datetime`` / ``date`` / ``UUID`` ``string`` with format date-time / date / uuid
``Literal[...]``, ``enum.Enum``    the scalar type with ``enum``
``int | str`` (``IntOrString``)    ``x-kubernetes-int-or-string``
``list[T]``, ``tuple[T, ...]``     ``array`` of T
``set[T]``, ``frozenset[T]``       ``array`` with ``x-kubernetes-list-type: set``
``dict[str, T]``                   ``object`` with ``additionalProperties`` T
``dict[str, Any]``                 ``object`` preserving unknown fields
``Any``                            any JSON value (preserve unknown fields)
``Model`` subclass                 ``object`` with ``properties``
``Resource`` subclass (nested)     embedded resource
``T | None``                       T, optional (absent means unset)
=================================  =============================================
"""

from __future__ import annotations

import collections.abc
import datetime as dt
import enum
import inspect
import re
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, StringConstraints, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from setpoint.api.declaration import Constraint, FieldSchema, cel_rules_of, constraints_of
from setpoint.api.resource import SPELL_OUT_DEFAULTS, Model, ObjectMeta, Resource, json_name_for
from setpoint.crd.errors import SchemaPath, StructuralError
from setpoint.crd.formats import NUMBER_FORMATS, STRING_FORMATS

__all__ = ["BuiltSchema", "model_schema", "resource_schema", "type_name"]

_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. "
    "Servers convert recognized schemas to the latest internal value and may reject "
    "unrecognized values."
)
_KIND_DOC = (
    "Kind is the REST resource this object represents, in CamelCase. Servers may infer "
    "it from the endpoint the client submits requests to. Cannot be updated."
)
_NESTED_METADATA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}

_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


@dataclass
class BuiltSchema:
    """A generated ``openAPIV3Schema`` with where each node came from and what went wrong."""

    schema: dict[str, Any]
    """The schema (possibly incomplete when ``errors`` is non-empty)."""
    origins: dict[SchemaPath, str]
    """Schema location -> the Python ``Class.field`` (or ``Class``) it was generated from."""
    errors: list[StructuralError]
    """Declarations that cannot be expressed as a valid schema."""

    def origin_of(self, path: SchemaPath) -> str | None:
        """The Python declaration behind ``path`` (the nearest enclosing one)."""
        for end in range(len(path), -1, -1):
            origin = self.origins.get(path[:end])
            if origin is not None:
                return origin
        return None


def resource_schema(cls: type[Resource]) -> BuiltSchema:
    """The ``openAPIV3Schema`` of a resource class, with origins and declaration errors."""
    builder = _Builder()
    schema = builder.resource_node(cls, (), embedded=False)
    return BuiltSchema(schema, builder.origins, builder.errors)


def model_schema(cls: type[Model]) -> BuiltSchema:
    """The schema of a single model class (as it appears nested inside a resource)."""
    builder = _Builder()
    schema = builder.type_node(cls, (), type_name(cls))
    return BuiltSchema(schema, builder.origins, builder.errors)


SCHEMA_DOC_ATTRIBUTE = "__schema_doc__"
"""A model's class attribute holding its schema ``description`` instead of its docstring:
for models whose docstring addresses Python developers rather than the CRD's users."""

# ``text`` and `text`, and reST roles: :func:`name`, :class:`~a.b.Name`, :doc:`label <target>`.
_LITERAL = re.compile(r"``(.+?)``")
_ROLE = re.compile(r":[a-zA-Z]+(?::[a-zA-Z]+)?:`~?([^`<]*?)(?:\s*<[^`>]*>)?`")
_INTERPRETED = re.compile(r"(?<![`\w])`([^`]+)`(?!`)")


def plain_text(text: str) -> str:
    """``text`` with reST inline markup reduced to plain text, for ``kubectl explain``.

    ````code```` and ```interpreted``` lose their backticks; a role such as
    ``:func:`~pkg.mod.name``` becomes its last part (``name``) when written with ``~``,
    its full target otherwise, or its label when written ``:role:`label <target>```.
    """

    def role(match: re.Match[str]) -> str:
        whole, target = match.group(0), match.group(1).strip()
        if "`~" in whole:
            return target.rsplit(".", 1)[-1]
        return target

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(r"\1", text)
    return _INTERPRETED.sub(r"\1", text)


def _doc(cls: type) -> str | None:
    raw = cls.__dict__.get(SCHEMA_DOC_ATTRIBUTE)
    if raw is None:
        raw = cls.__dict__.get("__doc__")
    if not isinstance(raw, str) or not raw.strip():
        return None
    return plain_text(inspect.cleandoc(raw))


def type_name(tp: Any) -> str:
    """A readable name for messages: the qualified name without ``<locals>`` noise."""
    name = getattr(tp, "__qualname__", None)
    if not isinstance(name, str):
        return repr(tp)
    return name.rsplit("<locals>.", 1)[-1]


class _Builder:
    def __init__(self) -> None:
        self.errors: list[StructuralError] = []
        self.origins: dict[SchemaPath, str] = {}
        self._stack: list[type[BaseModel]] = []

    def error(self, path: SchemaPath, origin: str | None, message: str, fix: str) -> None:
        self.errors.append(
            StructuralError(schema_path=path, message=message, fix=fix, origin=origin)
        )

    # -- models -----------------------------------------------------------------

    def resource_node(
        self, cls: type[Resource], path: SchemaPath, *, embedded: bool
    ) -> dict[str, Any]:
        """Root (or embedded) resource: apiVersion, kind, metadata and the declared fields."""
        self.origins.setdefault(path, type_name(cls))
        if not self._complete(cls, path):
            return {"type": "object"}
        node: dict[str, Any] = {"type": "object"}
        doc = _doc(cls)
        if doc:
            node["description"] = doc
        properties: dict[str, Any] = {
            "apiVersion": {"type": "string", "description": _API_VERSION_DOC},
            "kind": {"type": "string", "description": _KIND_DOC},
            "metadata": {"type": "object"},
        }
        required: list[str] = []
        self._stack.append(cls)
        try:
            for name, info in cls.model_fields.items():
                key = info.alias or name
                if name == "metadata":
                    annotation = info.annotation
                    if not (isinstance(annotation, type) and issubclass(annotation, ObjectMeta)):
                        self.error(
                            (*path, "properties", "metadata"),
                            f"{type_name(cls)}.metadata",
                            f"metadata is typed {type_name(annotation)}, not ObjectMeta",
                            "remove the metadata field; Resource already declares it",
                        )
                    continue
                sub_path: SchemaPath = (*path, "properties", key)
                sub, is_required = self.field_node(cls, name, info, sub_path)
                properties[key] = sub
                if is_required:
                    required.append(key)
        finally:
            self._stack.pop()
        node["properties"] = properties
        if required:
            node["required"] = required
        rules = cel_rules_of(cls)
        if rules:
            node["x-kubernetes-validations"] = [rule.to_schema() for rule in rules]
        self._model_constraints(cls, node, path)
        if embedded:
            node["x-kubernetes-embedded-resource"] = True
            if getattr(cls, "__setpoint_resource__", None) is not None:
                # The typed class parses only its own apiVersion and kind; say so to the server.
                gvk = cls.declaration().gvk
                properties["apiVersion"] = {"type": "string", "enum": [gvk.api_version]}
                properties["kind"] = {"type": "string", "enum": [gvk.kind]}
        return node

    def model_node(self, cls: type[BaseModel], path: SchemaPath, origin: str) -> dict[str, Any]:
        if not issubclass(cls, Model):
            self.error(
                path,
                origin,
                f"{type_name(cls)} is a pydantic BaseModel but not a setpoint Model",
                f"derive {type_name(cls)} from sp.Model so unknown fields survive and JSON "
                "names are camelCase and checked",
            )
            return {"type": "object"}
        if cls in self._stack:
            chain = " -> ".join(type_name(c) for c in (*self._stack, cls))
            self.error(
                path,
                origin,
                f"recursive type ({chain}); structural schemas cannot refer to themselves",
                "break the cycle, or type the recursive field as dict[str, Any] "
                "(preserve unknown fields)",
            )
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if issubclass(cls, Resource):
            return self.resource_node(cls, path, embedded=True)
        if issubclass(cls, ObjectMeta):
            # Metadata nested in a template (like a pod template's) keeps the parts a
            # template can set; everything else the server fills in.
            return _copy(_NESTED_METADATA)
        self.origins.setdefault(path, type_name(cls))
        if not self._complete(cls, path):
            return {"type": "object"}
        node: dict[str, Any] = {"type": "object"}
        doc = _doc(cls)
        if doc:
            node["description"] = doc
        properties: dict[str, Any] = {}
        required: list[str] = []
        self._stack.append(cls)
        try:
            for name, info in cls.model_fields.items():
                key = info.alias or name
                sub, is_required = self.field_node(cls, name, info, (*path, "properties", key))
                properties[key] = sub
                if is_required:
                    required.append(key)
        finally:
            self._stack.pop()
        if properties:
            node["properties"] = properties
        if required:
            node["required"] = required
        rules = cel_rules_of(cls)
        if rules:
            node["x-kubernetes-validations"] = [rule.to_schema() for rule in rules]
        self._model_constraints(cls, node, path)
        return node

    def _model_constraints(
        self, cls: type[BaseModel], node: dict[str, Any], path: SchemaPath
    ) -> None:
        """A model's class-level :class:`Constraint` s: merged in, or under ``allOf``."""
        target = _Target(node, path, type_name(cls), self.error)
        for constraint in constraints_of(cls):
            _add_constraint(target, constraint)

    def _complete(self, cls: type[BaseModel], path: SchemaPath) -> bool:
        if cls.__pydantic_complete__:
            return True
        try:
            cls.model_rebuild(raise_errors=True)
        except Exception as exc:  # pydantic raises several error types here
            self.error(
                path,
                type_name(cls),
                f"{type_name(cls)} has unresolved type annotations ({exc})",
                "define or import the referenced types before generating",
            )
            return False
        return True

    # -- fields -----------------------------------------------------------------

    def field_node(
        self, owner: type[BaseModel], name: str, info: FieldInfo, path: SchemaPath
    ) -> tuple[dict[str, Any], bool]:
        """Schema of one field, and whether it is required."""
        origin = f"{type_name(owner)}.{name}"
        self.origins[path] = origin
        annotation = info.annotation
        decl = _declarations(info.metadata)
        node = self.type_node(annotation, path, origin)
        self.apply(node, decl, path, origin)
        description = info.description or decl.pop("description", None)
        if description:
            node["description"] = plain_text(inspect.cleandoc(description))

        nullable = bool(decl.get("nullable"))
        required = info.is_required()
        if required and _allows_none(annotation) and not nullable:
            self.error(
                path,
                origin,
                "the type allows None but the field has no default, so it would be required "
                "and yet unset",
                f"give it a default (`{name}: ... | None = None`) to make it optional, or "
                "declare sp.field(nullable=True) if null is a value to store",
            )
        if not required:
            self._default(info, node, path, origin)
        return node, required

    def _default(
        self, info: FieldInfo, node: dict[str, Any], path: SchemaPath, origin: str
    ) -> None:
        if info.default_factory is not None:
            if info.default_factory_takes_validated_data:
                self.error(
                    path,
                    origin,
                    "the default factory depends on other fields, which a schema default cannot",
                    "use a constant default, or compute the value in the reconciler",
                )
                return
            value = info.default_factory()  # type: ignore[call-arg]
        else:
            value = info.default
        if value is None or value is PydanticUndefined:
            return
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(info.annotation or Any)
            encoded = adapter.dump_python(
                value, mode="json", by_alias=True, context={SPELL_OUT_DEFAULTS: True}
            )
        except Exception as exc:  # any serialization failure is a declaration problem
            self.error(
                path,
                origin,
                f"the default {value!r} cannot be written as JSON ({exc})",
                "use a default of the field's type",
            )
            return
        if encoded in ([], {}) and not isinstance(value, BaseModel):
            # An absent list or map already means empty in Kubernetes; a schema default
            # would only make the server write [] or {} into every object.
            return
        node["default"] = encoded

    # -- types ------------------------------------------------------------------

    def type_node(self, tp: Any, path: SchemaPath, origin: str) -> dict[str, Any]:
        """Schema for a type annotation (without field-level declarations)."""
        origin_type = get_origin(tp)
        if origin_type is typing.Annotated:
            base, *metadata = get_args(tp)
            node = self.type_node(base, path, origin)
            decl = _declarations(metadata)
            for key in ("json_name", "default"):
                if key in decl:
                    self.error(
                        path,
                        origin,
                        f"{key} declared inside a nested type annotation has no effect",
                        f"declare {key} on the field itself",
                    )
            description = decl.pop("description", None)
            self.apply(node, decl, path, origin)
            if description and "description" not in node:
                node["description"] = plain_text(inspect.cleandoc(description))
            return node
        if origin_type in (Union, types.UnionType):
            return self._union(tp, path, origin)
        if tp is Any or tp is object:
            return {"x-kubernetes-preserve-unknown-fields": True}
        if origin_type is Literal:
            return self._enum_node(list(get_args(tp)), path, origin, what="Literal")
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return self._enum_node([m.value for m in tp], path, origin, what=type_name(tp))
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is str:
            return {"type": "string"}
        if tp is dt.datetime:
            return {"type": "string", "format": "date-time"}
        if tp is dt.date:
            return {"type": "string", "format": "date"}
        if tp is uuid.UUID:
            return {"type": "string", "format": "uuid"}
        if tp is bytes:
            self.error(
                path,
                origin,
                "bytes fields do not round-trip through the API server's JSON",
                "use str with sp.field(format='byte') and base64-encode explicitly",
            )
            return {"type": "string", "format": "byte"}
        container = origin_type or tp
        if container in _SEQUENCES or container in _SETS:
            return self._array(tp, container, path, origin)
        if container in _MAPPINGS:
            return self._mapping(tp, path, origin)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return self.model_node(tp, path, origin)
        self.error(
            path,
            origin,
            f"type {type_name(tp)} has no schema mapping",
            "use str, int, float, bool, datetime, Literal/Enum, list, dict, a setpoint "
            "Model, or Any for free-form data",
        )
        return {"x-kubernetes-preserve-unknown-fields": True}

    def _union(self, tp: Any, path: SchemaPath, origin: str) -> dict[str, Any]:
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return self.type_node(args[0], path, origin)
        if sorted(args, key=repr) == sorted([int, str], key=repr):
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            }
        names = " | ".join(type_name(a) for a in args)
        self.error(
            path,
            origin,
            f"union {names} cannot be expressed in a structural schema",
            "use int | str (IntOrString), a Model with one optional field per alternative "
            "(plus a CEL rule requiring exactly one), or Any",
        )
        return {"x-kubernetes-preserve-unknown-fields": True}

    def _enum_node(
        self, values: list[Any], path: SchemaPath, origin: str, *, what: str
    ) -> dict[str, Any]:
        kinds = {_json_kind(v) for v in values}
        if len(kinds) != 1 or None in kinds:
            self.error(
                path,
                origin,
                f"{what} mixes value types {sorted(str(k) for k in kinds)}",
                "use values of a single type (all strings, all integers or all booleans)",
            )
            return {"x-kubernetes-preserve-unknown-fields": True}
        return {"type": kinds.pop(), "enum": list(values)}

    def _array(self, tp: Any, container: Any, path: SchemaPath, origin: str) -> dict[str, Any]:
        args = get_args(tp)
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            self.error(
                path,
                origin,
                f"fixed-length tuple {type_name(tp)} has no structural schema",
                "use tuple[T, ...] or list[T], or a Model with named fields",
            )
            return {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}
        item_type = args[0] if args else Any
        items = self.type_node(item_type, (*path, "items"), origin)
        node: dict[str, Any] = {"type": "array", "items": items}
        if container in _SETS:
            node["x-kubernetes-list-type"] = "set"
            _make_set_items_atomic(items)
        return node

    def _mapping(self, tp: Any, path: SchemaPath, origin: str) -> dict[str, Any]:
        args = get_args(tp)
        key_type, value_type = args if len(args) == 2 else (str, Any)
        if key_type is not str:
            self.error(
                path,
                origin,
                f"map keys must be str, not {type_name(key_type)} (JSON object keys are strings)",
                "type the field as dict[str, T]",
            )
        if value_type is Any or value_type is object:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        values = self.type_node(value_type, (*path, "additionalProperties"), origin)
        return {"type": "object", "additionalProperties": values}

    # -- declarations -----------------------------------------------------------

    def apply(
        self, node: dict[str, Any], decl: dict[str, Any], path: SchemaPath, origin: str
    ) -> None:
        """Apply field declarations to a typed node, checking each fits the node's type.

        Each declaration has one rule in :data:`_DECLARATION_RULES`; they run in that
        order, which is also the order of the keywords in the generated schema.
        """
        target = _Target(node, path, origin, self.error)
        for rule in _DECLARATION_RULES:
            rule(target, decl)


# -- declarations: one rule per keyword ------------------------------------------


@dataclass(frozen=True)
class _Fits:
    """The node types a declaration applies to, and how a misfit error names them."""

    applies_to: str
    """The fields it applies to, as the error says it (``integer and number fields``)."""
    test: Callable[[Any, bool], bool]
    """Whether a node of this ``type`` (and int-or-string flag) takes the declaration."""


_NUMBERS = _Fits("integer and number fields", lambda t, _ios: t in ("integer", "number"))
_STRINGS = _Fits("string fields", lambda t, ios: t == "string" or ios)
_SIZED = _Fits("strings, lists and maps", lambda t, ios: t in ("string", "array", "object") or ios)
_FORMATTED = _Fits(
    "string and number fields", lambda t, ios: t in ("string", "integer", "number") or ios
)
_SCALARS = _Fits(
    "scalar fields", lambda t, ios: t in ("string", "integer", "number", "boolean") or ios
)
_LISTS = _Fits("list fields", lambda t, _ios: t == "array")
_OBJECTS = _Fits("model and dict fields", lambda t, _ios: t == "object")
_FREE_FORM = _Fits("model, dict and Any fields", lambda t, ios: t in (None, "object") and not ios)
_EMBEDDABLE = _Fits(
    "object fields (a Resource class or dict[str, Any])",
    lambda t, ios: t == "object" or (t is None and not ios),
)


class _Target:
    """The typed node one field's declarations apply to, and where a misfit is reported.

    ``type`` and ``int_or_string`` are read once, before any declaration applies, so
    every rule judges the node as its type annotation made it.
    """

    def __init__(
        self,
        node: dict[str, Any],
        path: SchemaPath,
        origin: str,
        report: Callable[[SchemaPath, str | None, str, str], None],
    ) -> None:
        self.node = node
        self.type: Any = node.get("type")
        self.int_or_string = bool(node.get("x-kubernetes-int-or-string"))
        self._path = path
        self._origin = origin
        self._report = report

    def fits(self, fits: _Fits) -> bool:
        """Whether the node is of a type ``fits`` names."""
        return fits.test(self.type, self.int_or_string)

    def error(self, message: str, fix: str) -> None:
        """Report a problem with the field's declarations."""
        self._report(self._path, self._origin, message, fix)

    def misplaced(self, what: str, fits: _Fits, hint: str = "") -> None:
        """Report ``what`` declared on a field of a type it does not apply to."""
        shown = self.type or ("int-or-string" if self.int_or_string else "untyped")
        self.error(
            f"{what} applies to {fits.applies_to}, but the field is {shown}",
            hint or f"remove {what}, or declare it on a field of the right type",
        )


_Rule = Callable[[_Target, Mapping[str, Any]], None]


@dataclass(frozen=True)
class _Keyword:
    """A declaration written as one schema keyword, on the node types it fits."""

    key: str
    """The declaration: a :class:`FieldSchema` attribute, or a key :func:`_declarations` adds."""
    schema_key: str
    """The schema keyword it becomes."""
    fits: _Fits | None = None
    """The node types that take it; ``None``: every node."""
    flag: bool = False
    """A boolean declaration: written as ``true`` when set, left out when unset or false."""
    misfit_reported_by: str | None = None
    """The declaration whose misfit error covers this one too (``exclusive_minimum``
    needs ``minimum``): a misfit here is dropped instead of reported twice."""
    item_hint: bool = False
    """On a list field, the misfit error suggests declaring it on the item type."""

    def __call__(self, target: _Target, decl: Mapping[str, Any]) -> None:
        if self.flag:
            if not decl.get(self.key):
                return
            value: Any = True
        elif self.key in decl:
            value = decl[self.key]
        else:
            return
        if self.fits is None or target.fits(self.fits):
            target.node[self.schema_key] = value
        elif self.misfit_reported_by is None:
            target.misplaced(self.key, self.fits, self._hint(target))

    def _hint(self, target: _Target) -> str:
        if not (self.item_hint and target.type == "array"):
            return ""
        return (
            "to constrain each item, annotate the item type: "
            f"list[Annotated[str, sp.field({self.key}=...)]]"
        )


@dataclass(frozen=True)
class _Length:
    """A generic length bound, written as the keyword of the node's type.

    pydantic's ``min_length``/``max_length`` and ``annotated_types.Len`` bound
    characters, items or keys, whichever the field holds.
    """

    key: str
    """``len_min`` or ``len_max`` (see :func:`_declarations`)."""
    by_type: Mapping[str, str]
    """Node type -> the schema keyword (``string``, ``array`` and ``object``)."""

    def __call__(self, target: _Target, decl: Mapping[str, Any]) -> None:
        if self.key not in decl:
            return
        if not target.fits(_SIZED):
            target.misplaced("a length limit", _SIZED)
            return
        node_type = "string" if target.int_or_string else target.type
        target.node[self.by_type[node_type]] = decl[self.key]


def _apply_enum(target: _Target, decl: Mapping[str, Any]) -> None:
    """``enum`` on a scalar field, every value of the field's JSON type (any for int-or-string)."""
    if "enum" not in decl:
        return
    if not target.fits(_SCALARS):
        target.misplaced("enum", _SCALARS)
        return
    values = list(decl["enum"])
    wrong = [] if target.int_or_string else [v for v in values if _json_kind(v) != target.type]
    if wrong:
        target.error(
            f"enum values {wrong} are not of the field's type {target.type}",
            "list values of the field's type",
        )
        return
    target.node["enum"] = values


def _apply_list_type(target: _Target, decl: Mapping[str, Any]) -> None:
    """The list type (:func:`_list_type_of`) on a list field.

    The object items of a set are made atomic; the keys of a map are written with
    the items' JSON names.
    """
    list_type = _list_type_of(decl)
    if list_type is None:
        return
    if not target.fits(_LISTS):
        target.misplaced("list_type/unique_items/list_map_keys", _LISTS)
        return
    target.node["x-kubernetes-list-type"] = list_type
    items = target.node.get("items", {})
    if list_type == "set":
        _make_set_items_atomic(items)
    if list_type == "map":
        properties = items.get("properties") or {}
        keys = [_json_map_key(key, properties) for key in decl.get("list_map_keys", ())]
        target.node["x-kubernetes-list-map-keys"] = keys


def _list_type_of(decl: Mapping[str, Any]) -> str | None:
    """The declared list type, ``None`` when none is.

    ``list_type`` when given, else ``map`` when ``list_map_keys`` are named, else
    ``set`` for ``unique_items``.
    """
    declared: str | None = decl.get("list_type")
    if declared:
        return declared
    if decl.get("list_map_keys"):
        return "map"
    if decl.get("unique_items"):
        return "set"
    return None


def _json_map_key(key: str, properties: Mapping[str, Any]) -> str:
    """A map-list key as the schema names it.

    A Python name becomes its JSON name when only that is a field of the items;
    any other key is kept as declared.
    """
    derived = json_name_for(key)
    return derived if key not in properties and derived in properties else key


def _apply_rules(target: _Target, decl: Mapping[str, Any]) -> None:
    """The field's CEL ``rules``, after those its model class declares."""
    if decl.get("rules"):
        existing = target.node.setdefault("x-kubernetes-validations", [])
        existing.extend(rule.to_schema() for rule in decl["rules"])


def _apply_embedded_resource(target: _Target, decl: Mapping[str, Any]) -> None:
    """``embedded_resource`` on an object or untyped field: a whole Kubernetes object.

    The node stays free-form unless its class declares properties.
    """
    if not decl.get("embedded_resource"):
        return
    if not target.fits(_EMBEDDABLE):
        target.misplaced("embedded_resource", _EMBEDDABLE)
        return
    target.node["type"] = "object"
    target.node["x-kubernetes-embedded-resource"] = True
    if "properties" not in target.node:
        target.node["x-kubernetes-preserve-unknown-fields"] = True


def _apply_junctors(target: _Target, decl: Mapping[str, Any]) -> None:
    """A field's ``all_of``/``any_of``/``one_of``/``not_``, each a :class:`Constraint`."""
    junctors = {k: decl[k] for k in ("all_of", "any_of", "one_of", "not_") if decl.get(k)}
    if junctors:
        _add_constraint(target, Constraint(**junctors))


def _add_constraint(target: _Target, constraint: Constraint) -> None:
    """Write ``constraint``'s keywords on the target node, with JSON names, checked.

    Keywords the node already has (its own ``required``, say) are not overwritten: the
    constraint then goes under ``allOf``, which means the same.
    """
    fragment = constraint.to_schema()
    _resolve_constraint(target, fragment, target.node, "")
    if any(key in target.node for key in fragment):
        target.node.setdefault("allOf", []).append(fragment)
    else:
        target.node.update(fragment)


def _resolve_constraint(
    target: _Target, fragment: dict[str, Any], node: Mapping[str, Any], where: str
) -> None:
    """Rename ``fragment``'s field names to the JSON names of ``node``; report what cannot be.

    The structural rules let a junctor name only properties and items the node itself
    declares; a format must be one the server checks on the node's type (any other is
    stripped by the server, so the constraint would check nothing).
    """
    here = f" (in {where})" if where else ""
    properties = node.get("properties")
    declared: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    free_form = node.get("x-kubernetes-preserve-unknown-fields") is True or isinstance(
        node.get("additionalProperties"), Mapping
    )

    def json_key(name: str) -> str | None:
        if name in declared:
            return name
        derived = json_name_for(name)
        if derived in declared:
            return derived
        return name if free_form and not declared else None

    if "required" in fragment:
        keys = []
        for name in fragment["required"]:
            key = json_key(name)
            if key is None:
                target.error(
                    f"the constraint requires {name!r}{here}, which the type does not declare",
                    f"name a field of the type (declared: {sorted(declared) or 'none'})",
                )
                key = name
            keys.append(key)
        fragment["required"] = keys
    if "properties" in fragment:
        renamed: dict[str, Any] = {}
        for name, sub in fragment["properties"].items():
            key = json_key(name)
            if key is None or key not in declared:
                target.error(
                    f"the constraint has properties[{name!r}]{here}, which the type does not "
                    "declare; a junctor may only constrain declared fields",
                    f"name a field of the type (declared: {sorted(declared) or 'none'})",
                )
                continue
            _resolve_constraint(target, sub, declared[key], f"{where}.{key}" if where else key)
            renamed[key] = sub
        fragment["properties"] = renamed
    if "items" in fragment:
        items = node.get("items")
        if node.get("type") != "array" or not isinstance(items, Mapping):
            target.error(
                f"the constraint has items{here}, but the value is not a list",
                "constrain items on a list field only",
            )
        else:
            _resolve_constraint(target, fragment["items"], items, f"{where}[*]")
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in fragment.get(key, ()):
            _resolve_constraint(target, branch, node, where)
    if "not" in fragment:
        _resolve_constraint(target, fragment["not"], node, where)
    fmt = fragment.get("format")
    if fmt is not None:
        node_type = node.get("type")
        known = NUMBER_FORMATS[node_type] if node_type in NUMBER_FORMATS else set(STRING_FORMATS)
        normalized = fmt if node_type in NUMBER_FORMATS else str(fmt).replace("-", "")
        if normalized not in known:
            target.error(
                f"the constraint's format {fmt!r}{here} is not one the API server checks on "
                f"a {node_type or 'untyped'} value; the server would strip it and check nothing",
                f"use one of {sorted(known)}",
            )


_DECLARATION_RULES: tuple[_Rule, ...] = (
    _Keyword("minimum", "minimum", _NUMBERS),
    _Keyword("maximum", "maximum", _NUMBERS),
    _Keyword("multiple_of", "multipleOf", _NUMBERS),
    _Keyword(
        "exclusive_minimum", "exclusiveMinimum", _NUMBERS, flag=True, misfit_reported_by="minimum"
    ),
    _Keyword(
        "exclusive_maximum", "exclusiveMaximum", _NUMBERS, flag=True, misfit_reported_by="maximum"
    ),
    _Keyword("min_length", "minLength", _STRINGS, item_hint=True),
    _Keyword("max_length", "maxLength", _STRINGS, item_hint=True),
    _Keyword("pattern", "pattern", _STRINGS, item_hint=True),
    _Length("len_min", {"string": "minLength", "array": "minItems", "object": "minProperties"}),
    _Length("len_max", {"string": "maxLength", "array": "maxItems", "object": "maxProperties"}),
    _Keyword("format", "format", _FORMATTED),
    _apply_enum,
    _Keyword("min_items", "minItems", _LISTS),
    _Keyword("max_items", "maxItems", _LISTS),
    _apply_list_type,
    _Keyword("min_properties", "minProperties", _OBJECTS),
    _Keyword("max_properties", "maxProperties", _OBJECTS),
    _Keyword("map_type", "x-kubernetes-map-type", _OBJECTS),
    _Keyword("nullable", "nullable", flag=True),
    _apply_rules,
    _apply_junctors,
    _Keyword(
        "preserve_unknown_fields", "x-kubernetes-preserve-unknown-fields", _FREE_FORM, flag=True
    ),
    _apply_embedded_resource,
    _Keyword("title", "title"),
    _Keyword("example", "example"),
)
"""How each field declaration becomes schema keywords, in the order they are written."""


def _copy(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        out[key] = _copy(value) if isinstance(value, dict) else value
    return out


def _make_set_items_atomic(items: dict[str, Any]) -> None:
    # The server requires object items of a set to be atomic (compared as whole values).
    if items.get("type") == "object":
        items["x-kubernetes-map-type"] = "atomic"


def _json_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _allows_none(tp: Any) -> bool:
    if tp is None or tp is type(None):
        return True
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _allows_none(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return any(_allows_none(arg) for arg in get_args(tp))
    return False


_FIELD_SCHEMA_DEFAULTS = {f.name: f.default for f in fields(FieldSchema)}


def _declarations(metadata: Iterable[Any]) -> dict[str, Any]:
    """Merge FieldSchema, nested FieldInfo and annotated_types constraints into one mapping."""
    decl: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldSchema):
            for name, default in _FIELD_SCHEMA_DEFAULTS.items():
                value = getattr(item, name)
                if value != default:
                    decl[name] = value
        elif isinstance(item, FieldInfo):
            decl.update(_declarations(item.metadata))
            if item.description:
                decl["description"] = item.description
            if item.alias_priority == 2:
                decl["json_name"] = item.alias
            if item.default is not PydanticUndefined or item.default_factory is not None:
                decl["default"] = True
        elif isinstance(item, annotated_types.Gt):
            decl.update(minimum=item.gt, exclusive_minimum=True)
        elif isinstance(item, annotated_types.Ge):
            decl["minimum"] = item.ge
        elif isinstance(item, annotated_types.Lt):
            decl.update(maximum=item.lt, exclusive_maximum=True)
        elif isinstance(item, annotated_types.Le):
            decl["maximum"] = item.le
        elif isinstance(item, annotated_types.MultipleOf):
            decl["multiple_of"] = item.multiple_of
        elif isinstance(item, annotated_types.MinLen):
            decl["len_min"] = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            decl["len_max"] = item.max_length
        elif isinstance(item, StringConstraints):
            if item.min_length is not None:
                decl["min_length"] = item.min_length
            if item.max_length is not None:
                decl["max_length"] = item.max_length
            if isinstance(item.pattern, str):
                decl["pattern"] = item.pattern
        elif isinstance(item, annotated_types.GroupedMetadata):
            decl.update(_declarations(item))  # Interval, Len: iterate their parts
        elif isinstance(getattr(item, "pattern", None), str):
            # pydantic's Field(pattern=...) / StringConstraints metadata
            decl["pattern"] = item.pattern
    return decl
