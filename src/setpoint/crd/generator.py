"""Resource classes -> CustomResourceDefinition manifests.

:func:`crd_for` turns the classes of one kind (one per version) into a CRD;
:func:`generate_crds` does it for every kind in a set of classes and names the
files the kubebuilder way (``crd/bases/<group>_<plural>.yaml``).

Everything is checked before anything is returned: the schema of each version
against the API server's structural rules, the declarations that span
versions (one storage version, consistent names and scope), and that printer
columns, the scale subresource and selectable fields point at fields that
exist with the right types. All problems are reported together, each naming
the Python class and field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from setpoint.api.declaration import ResourceOptions, default_plural, version_priority
from setpoint.api.resource import Resource
from setpoint.crd.conversion import WebhookClientConfig, conversion_for
from setpoint.crd.errors import CRDGenerationError, SchemaPath, StructuralError
from setpoint.crd.manifests import Manifest
from setpoint.crd.schema import BuiltSchema, resource_schema, type_name
from setpoint.crd.structural import validate_structural

__all__ = ["crd_for", "crd_path", "generate_crds", "version_priority"]


def _label(cls: type[Resource]) -> str:
    try:
        gvk = cls.declaration().gvk
    except TypeError:
        return type_name(cls)
    return f"{gvk.kind} {gvk.api_version} ({cls.__module__}.{type_name(cls)})"


def _problem(cls: type[Resource] | None, message: str, fix: str) -> StructuralError:
    return StructuralError(
        schema_path=(),
        message=message,
        fix=fix,
        resource=_label(cls) if cls is not None else None,
    )


def crd_for(*classes: type[Resource], webhook: WebhookClientConfig | None = None) -> dict[str, Any]:
    """The CustomResourceDefinition for one kind, from its version classes.

    Pass one class per served version (``crd_for(WidgetV1Alpha1, WidgetV1)``);
    exactly one must be the storage version (a single class is it
    implicitly). Versions with the same schema are left to the API server's
    ``None`` conversion; when a spoke declares converters
    (:class:`~setpoint.api.conversion.Convertible`) the CRD gets a ``Webhook`` conversion
    reaching the operator as ``webhook`` says (default: the kubebuilder
    layout's ``webhook-service``). See :mod:`setpoint.crd.conversion`.

    Raises:
        CRDGenerationError: listing every problem, each naming the class and field
            (including versions whose schemas differ without a converter).

    """
    errors: list[StructuralError] = []
    crd = _build_crd(classes, errors, webhook)
    if errors or crd is None:
        raise CRDGenerationError(errors)
    return crd


def crd_path(crd: Mapping[str, Any]) -> str:
    """The kubebuilder file path of a CRD: ``crd/bases/<group>_<plural>.yaml``."""
    spec = crd["spec"]
    return f"crd/bases/{spec['group']}_{spec['names']['plural']}.yaml"


def generate_crds(
    resources: Iterable[type[Resource]], *, webhook: WebhookClientConfig | None = None
) -> list[Manifest]:
    """One manifest per kind for every declared resource class, sorted by file name.

    Classes are grouped by group and kind, so each kind's versions become one
    CRD. Undeclared classes (bases without @resource) are skipped. Kinds with
    converters get a ``Webhook`` conversion reaching the operator as
    ``webhook`` says (see :func:`crd_for`).

    Raises:
        CRDGenerationError: listing the problems of every kind at once.

    """
    by_kind: dict[tuple[str, str], list[type[Resource]]] = {}
    for cls in dict.fromkeys(resources):
        if not (isinstance(cls, type) and issubclass(cls, Resource) and cls.is_declared()):
            continue
        gvk = cls.declaration().gvk
        by_kind.setdefault((gvk.group, gvk.kind), []).append(cls)
    errors: list[StructuralError] = []
    manifests: list[Manifest] = []
    for key in sorted(by_kind):
        crd = _build_crd(by_kind[key], errors, webhook)
        if crd is not None:
            manifests.append(Manifest(crd_path(crd), (crd,)))
    if errors:
        raise CRDGenerationError(errors)
    manifests.sort(key=lambda m: m.path)
    return manifests


# --------------------------------------------------------------------------- assembly


def _build_crd(
    classes: Sequence[type[Resource]],
    errors: list[StructuralError],
    webhook: WebhookClientConfig | None = None,
) -> dict[str, Any] | None:
    if not classes:
        errors.append(_problem(None, "no resource classes given", "pass the version classes"))
        return None
    declared: list[tuple[type[Resource], ResourceOptions]] = []
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, Resource)):
            errors.append(
                _problem(None, f"{cls!r} is not a Resource class", "pass Resource subclasses")
            )
            continue
        try:
            declared.append((cls, cls.declaration()))
        except TypeError as exc:
            errors.append(_problem(cls, str(exc), "decorate it with @sp.resource(...)"))
    if len(declared) != len(classes):
        return None

    first_cls, first = declared[0]
    for cls, options in declared[1:]:
        if (options.group, options.resolved_kind) != (first.group, first.resolved_kind):
            errors.append(
                _problem(
                    cls,
                    f"declares {options.resolved_kind}.{options.group} but "
                    f"{_label(first_cls)} declares {first.resolved_kind}.{first.group}",
                    "pass the versions of one kind per CRD (generate_crds groups them)",
                )
            )
            return None
    versions: dict[str, type[Resource]] = {}
    for cls, options in declared:
        if options.version in versions:
            errors.append(
                _problem(
                    cls,
                    f"version {options.version} is also declared by "
                    f"{_label(versions[options.version])}",
                    "give each class its own version",
                )
            )
        versions[options.version] = cls

    storage = [cls for cls, options in declared if options.storage]
    if len(declared) == 1:
        storage_cls = declared[0][0]
    elif len(storage) == 1:
        storage_cls = storage[0]
    else:
        listing = ", ".join(_label(c) for c in storage) or "none"
        errors.append(
            _problem(
                None,
                f"{first.resolved_kind}.{first.group} has {len(declared)} versions and "
                f"{len(storage)} storage versions ({listing})",
                "mark exactly one version class with @sp.resource(..., storage=True)",
            )
        )
        return None

    names = _names(declared, errors)
    version_entries = []
    for cls, options in sorted(declared, key=lambda d: version_priority(d[1].version)):
        entry = _version_entry(cls, options, cls is storage_cls, errors)
        if entry is not None:
            version_entries.append(entry)
    if names is None or len(version_entries) != len(declared):
        return None
    schemas = {e["name"]: e["schema"]["openAPIV3Schema"] for e in version_entries}
    problems = len(errors)
    conversion = conversion_for([cls for cls, _ in declared], schemas, webhook, errors)
    if len(errors) > problems:
        return None
    scope = names.pop("scope")
    spec: dict[str, Any] = {
        "group": first.group,
        "names": names,
        "scope": scope,
        "versions": version_entries,
    }
    if conversion is not None:
        spec["conversion"] = conversion
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names['plural']}.{first.group}"},
        "spec": spec,
    }


def _names(
    declared: Sequence[tuple[type[Resource], ResourceOptions]], errors: list[StructuralError]
) -> dict[str, Any] | None:
    """CRD-wide names and scope; every version that declares one must agree."""
    resolved: dict[str, Any] = {}
    ok = True
    checks: list[tuple[str, str, Any]] = [
        ("scope", "scope", lambda o: o.scope),
        ("plural", "plural", lambda o: o.plural),
        ("singular", "singular", lambda o: o.singular),
        ("listKind", "list_kind", lambda o: o.list_kind),
        ("shortNames", "short_names", lambda o: o.short_names),
        ("categories", "categories", lambda o: o.categories),
    ]
    for key, option, get in checks:
        values = {}
        for cls, options in declared:
            value = get(options)
            if value is not None:
                values[cls] = tuple(value) if isinstance(value, list | tuple) else value
        distinct = set(values.values())
        if len(distinct) > 1:
            listing = "; ".join(f"{_label(c)}: {v!r}" for c, v in values.items())
            errors.append(
                _problem(
                    None,
                    f"versions disagree on {option} ({listing})",
                    f"declare the same {option} on every version class, or on only one",
                )
            )
            ok = False
        elif distinct:
            resolved[key] = distinct.pop()
    if not ok:
        return None
    kind = declared[0][1].resolved_kind
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": resolved.get("listKind") or f"{kind}List",
        "plural": resolved.get("plural") or default_plural(kind.lower()),
        "singular": resolved.get("singular") or kind.lower(),
        "scope": resolved.get("scope") or "Namespaced",
    }
    if resolved.get("shortNames"):
        names["shortNames"] = list(resolved["shortNames"])
    if resolved.get("categories"):
        names["categories"] = list(resolved["categories"])
    if names["kind"] == names["listKind"]:
        errors.append(
            _problem(declared[0][0], "kind and listKind are equal", "choose another list_kind")
        )
        return None
    return names


def _version_entry(
    cls: type[Resource], options: ResourceOptions, storage: bool, errors: list[StructuralError]
) -> dict[str, Any] | None:
    label = _label(cls)
    built = resource_schema(cls)
    has_status = options.has_status(cls)
    local: list[StructuralError] = list(built.errors)
    if not built.errors:
        local.extend(validate_structural(built.schema, status_subresource=has_status))
    local.extend(_reference_errors(built, options))
    if local:
        errors.extend(_attribute(error, built, label) for error in local)
        return None
    entry: dict[str, Any] = {
        "name": options.version,
        "served": options.served,
        "storage": storage,
        "schema": {"openAPIV3Schema": built.schema},
    }
    if options.deprecated:
        entry["deprecated"] = True
        if options.deprecation_warning is not None:
            entry["deprecationWarning"] = options.deprecation_warning
    if options.printer_columns:
        entry["additionalPrinterColumns"] = [c.to_manifest() for c in options.printer_columns]
    if options.selectable_fields:
        entry["selectableFields"] = [{"jsonPath": path} for path in options.selectable_fields]
    subresources: dict[str, Any] = {}
    if has_status:
        subresources["status"] = {}
    if options.scale is not None:
        subresources["scale"] = options.scale.to_manifest()
    if subresources:
        entry["subresources"] = subresources
    return entry


def _attribute(error: StructuralError, built: BuiltSchema, label: str) -> StructuralError:
    return StructuralError(
        schema_path=error.schema_path,
        message=error.message,
        fix=error.fix,
        origin=error.origin or built.origin_of(error.schema_path),
        resource=error.resource or label,
    )


# --------------------------------------------------------------------------- references


_SIMPLE_SEGMENT = re.compile(r"\.([A-Za-z_$][A-Za-z0-9_$-]*)")


def _resolve(schema: Mapping[str, Any], json_path: str) -> tuple[str, Mapping[str, Any] | None]:
    """Follow the leading ``.a.b`` segments of a JSON path through a schema.

    Returns ``("found", node)``, ``("opaque", None)`` when the path enters a
    part the schema does not describe field by field (metadata, maps,
    preserve-unknown, or JSONPath filters), or ``("missing", parent)``.
    """
    node: Mapping[str, Any] = schema
    pos = 0
    depth = 0
    while pos < len(json_path):
        match = _SIMPLE_SEGMENT.match(json_path, pos)
        if match is None:
            return ("opaque", None)  # brackets, filters, wildcards: not followed
        name = match.group(1)
        if depth == 0 and name == "metadata":
            return ("opaque", None)
        properties = node.get("properties")
        if isinstance(properties, Mapping) and name in properties:
            node = properties[name]
        elif "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields"):
            return ("opaque", None)
        else:
            return ("missing", node)
        pos = match.end()
        depth += 1
    return ("found", node)


def _path_to(json_path: str) -> SchemaPath:
    out: list[str | int] = []
    for segment in _SIMPLE_SEGMENT.findall(json_path):
        out.extend(("properties", segment))
    return tuple(out)


def _reference_errors(built: BuiltSchema, options: ResourceOptions) -> list[StructuralError]:
    """Printer columns, scale paths and selectable fields must name existing fields."""
    errors: list[StructuralError] = []
    schema = built.schema

    def check(json_path: str, what: str, types: tuple[str, ...] | None) -> None:
        state, node = _resolve(schema, json_path)
        if state == "missing":
            errors.append(
                StructuralError(
                    schema_path=_path_to(json_path),
                    message=f"{what} {json_path!r} names a field the schema does not declare",
                    fix="point it at a declared field, using JSON (camelCase) names",
                )
            )
        elif state == "found" and types is not None and node is not None:
            node_type = node.get("type")
            if node.get("x-kubernetes-int-or-string"):
                node_type = "int-or-string"
            if node_type not in types:
                errors.append(
                    StructuralError(
                        schema_path=_path_to(json_path),
                        message=f"{what} {json_path!r} points at a field of type {node_type}, "
                        f"but must point at {' or '.join(types)}",
                        fix="point it at a field of the right type",
                    )
                )

    for column in options.printer_columns:
        check(column.json_path, f"printer column {column.name!r} path", None)
    if options.scale is not None:
        check(options.scale.spec_replicas_path, "scale spec_replicas_path", ("integer",))
        check(options.scale.status_replicas_path, "scale status_replicas_path", ("integer",))
        if options.scale.label_selector_path is not None:
            check(options.scale.label_selector_path, "scale label_selector_path", ("string",))
    for path in options.selectable_fields:
        check(path, "selectable field", ("string", "integer", "boolean"))
    return errors
