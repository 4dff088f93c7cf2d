"""apiextensions v1beta1 CRDs (and OpenAPI v2 habits) -> apiextensions v1 CRDs.

:func:`migrate_crd` rewrites one CustomResourceDefinition document and says
what it changed and what still needs a person. ``setpoint crd migrate`` wraps
it. What it does, in order:

* **v1beta1 -> v1**: every default v1beta1's ``SetDefaults_CustomResourceDefinitionSpec``
  applied, then the internal -> v1 conversion (k8s.io/apiextensions-apiserver). Top-level
  ``validation``, ``subresources``, ``additionalPrinterColumns`` and ``selectableFields``
  are copied into every version (``JSONPath`` becomes ``jsonPath``); ``spec.version``
  becomes a ``versions`` list (served, storage), or is dropped, flagged when it was not
  the first of ``versions``; ``served``/``storage`` become explicit booleans and a count of
  storage versions other than one is flagged; ``conversion.webhookClientConfig``
  becomes ``conversion.webhook.clientConfig`` with ``conversionReviewVersions``
  (v1beta1's default, ``["v1beta1"]``, made explicit) and a missing strategy becomes
  ``None``; a missing, null or empty ``scope`` becomes ``Namespaced``; a protected
  group (``*.k8s.io``, ``*.kubernetes.io``) without the ``api-approved.kubernetes.io``
  annotation, which v1 requires and v1beta1 did not, gets an ``unapproved, ...`` value
  and a note; server-owned metadata and ``status`` are dropped. (``names.singular``,
  ``names.listKind`` and the webhook service's port 443 are defaulted by v1 the same
  way, so they are left to the server.)
* **pruning**: v1beta1 defaulted ``preserveUnknownFields`` to true. The output
  sets it to ``false`` explicitly, because a CRD first created through
  v1beta1 keeps ``true`` on the server until a manifest says otherwise (a
  server-side apply that omits the field leaves it ``true``, and then the
  server rejects defaults and webhook conversion). Where the old schema relied
  on pruning being off (objects with no declared fields, a version without a
  schema, ``additionalProperties: true``) the node gets
  ``x-kubernetes-preserve-unknown-fields: true`` so no stored data is dropped.
* **OpenAPI v2 habits**: a missing ``type: object`` (or ``array``) is added
  where the node has properties (or items); ``x-example`` becomes ``example``;
  ``x-nullable`` and ``type: [T, "null"]`` become ``type: T`` + ``nullable:
  true``; ``type: [integer, string]`` becomes ``x-kubernetes-int-or-string``;
  local ``$ref``s to ``definitions`` are inlined; ``uniqueItems: true`` on a
  list of scalars becomes ``x-kubernetes-list-type: set``; other unsupported
  keywords (``patternProperties``, ``dependencies``, ``additionalItems``,
  ``id``, ``$schema``, vendor extensions) are removed, each with a note.
* **structural rules**: whatever :func:`setpoint.crd.validate_structural` still
  reports after the fixes becomes a "needs a human" note.

The input is never modified. Every note names the version and the field path.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from setpoint.api.errors import SetpointError
from setpoint.crd import validate_structural
from setpoint.crd.structural import (
    JUNCTOR_FORBIDDEN_KEYWORDS,
    ROOT_KEYWORDS_WITH_STATUS,
    SCHEMA_KEYWORDS,
)

__all__ = ["CRDMigration", "MigrateOptions", "MigrationInputError", "MigrationNote", "migrate_crd"]

NoteAction = Literal["changed", "removed", "needs-human"]

_V1 = "apiextensions.k8s.io/v1"
_V1BETA1 = "apiextensions.k8s.io/v1beta1"
_SERVER_METADATA = (
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_API_APPROVED = "api-approved.kubernetes.io"
_TOP_LEVEL_PER_VERSION = (
    "validation",
    "subresources",
    "additionalPrinterColumns",
    "selectableFields",
)
"""v1beta1 spec fields that v1 only has per version (``validation`` becomes ``schema``)."""
_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
_MAX_REF_DEPTH = 32


@dataclass(frozen=True, kw_only=True)
class MigrateOptions:
    """How :func:`migrate_crd` treats data the old CRD kept because pruning was off."""

    keep_unknown_fields: bool = True
    """When the input had pruning off (v1beta1's default), mark every object node that
    declares properties with ``x-kubernetes-preserve-unknown-fields`` too, so fields
    objects carry outside the schema survive (lossless, the default). ``False`` marks
    only nodes with no declared fields; undeclared fields elsewhere are then pruned,
    and a needs-human note says so."""


class MigrationInputError(SetpointError, ValueError):
    """The document cannot be migrated (not a CRD, or malformed); the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class MigrationNote:
    """One thing :func:`migrate_crd` changed, removed, or could not decide alone."""

    action: NoteAction
    """``changed`` (rewritten to the v1 equivalent), ``removed`` (no v1 equivalent; the
    behaviour it described is gone) or ``needs-human`` (left for a person to decide)."""
    where: str
    """The field path in the output, e.g. ``spec.versions[v1].schema...properties.spec``."""
    message: str
    """What happened and, for ``needs-human``, what to do."""

    def __str__(self) -> str:
        return f"[{self.action}] {self.where}: {self.message}"


@dataclass(frozen=True, kw_only=True)
class CRDMigration:
    """The v1 CRD made from one input document, with the notes that explain it."""

    name: str
    """The CRD's ``metadata.name``."""
    source_api_version: str
    """The input's apiVersion (``apiextensions.k8s.io/v1beta1`` or ``.../v1``)."""
    crd: dict[str, Any]
    """The migrated ``apiextensions.k8s.io/v1`` document."""
    notes: tuple[MigrationNote, ...] = field(default=())
    """Every change, removal and open question, in document order."""

    @property
    def needs_human(self) -> tuple[MigrationNote, ...]:
        """The notes a person still has to act on."""
        return tuple(n for n in self.notes if n.action == "needs-human")


class _Notes:
    def __init__(self) -> None:
        self.items: list[MigrationNote] = []

    def add(self, action: NoteAction, where: str, message: str) -> None:
        self.items.append(MigrationNote(action=action, where=where, message=message))


def migrate_crd(
    document: Mapping[str, Any], *, options: MigrateOptions | None = None
) -> CRDMigration:
    """Migrate one CRD document to apiextensions.k8s.io/v1 (see the module docstring).

    A v1 document is accepted too: only the schema fixes and the
    ``preserveUnknownFields`` rule apply then.

    Raises:
        MigrationInputError: the document is not a CustomResourceDefinition of
            apiextensions v1beta1 or v1, or its spec is not a mapping.

    """
    if not isinstance(document, Mapping):
        raise MigrationInputError("the document is not a mapping; expected a CRD manifest")
    api_version = document.get("apiVersion")
    if document.get("kind") != "CustomResourceDefinition" or api_version not in (_V1, _V1BETA1):
        raise MigrationInputError(
            f"kind {document.get('kind')!r} apiVersion {api_version!r} is not a "
            "CustomResourceDefinition of apiextensions.k8s.io/v1beta1 or v1"
        )
    crd = copy.deepcopy(dict(document))
    metadata = crd.get("metadata")
    name = str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        raise MigrationInputError(f"CRD {name or '<unnamed>'}: spec is missing or not a mapping")
    notes = _Notes()
    crd["apiVersion"] = _V1
    if api_version == _V1BETA1:
        notes.add("changed", "apiVersion", f"{_V1BETA1} -> {_V1}")
    if isinstance(metadata, dict):
        dropped = [k for k in _SERVER_METADATA if k in metadata]
        for key in dropped:
            del metadata[key]
        if dropped:
            notes.add("removed", "metadata", f"server-owned fields {dropped} dropped")
    if "status" in crd:
        del crd["status"]
        notes.add("removed", "status", "the status belongs to the server; dropped")
    _migrate_spec(
        spec, from_v1beta1=api_version == _V1BETA1, notes=notes, options=options or MigrateOptions()
    )
    _approve_protected_group(crd, notes)
    return CRDMigration(
        name=name,
        source_api_version=str(api_version),
        crd=crd,
        notes=tuple(notes.items),
    )


# --------------------------------------------------------------------------- spec


def _migrate_spec(
    spec: dict[str, Any], *, from_v1beta1: bool, notes: _Notes, options: MigrateOptions
) -> None:
    if not spec.get("scope"):
        # v1beta1's SetDefaults_CustomResourceDefinitionSpec: len(Scope) == 0 -> Namespaced,
        # so a missing, null or "" scope was namespaced; v1 requires the field.
        spec["scope"] = "Namespaced"
        notes.add("changed", "spec.scope", "made explicit (Namespaced, v1beta1's default)")
    versions = _versions(spec, notes)
    # The internal -> v1 conversion copies each top-level field into every version.
    moved = {key: _pop_top(spec, key) for key in _TOP_LEVEL_PER_VERSION}
    for key, value in moved.items():
        if value is not None:
            notes.add("changed", f"spec.{key}", "moved into every version")
    for version in versions:
        vname = str(version.get("name", "?"))
        for key, value in moved.items():
            target = "schema" if key == "validation" else key
            if value is not None and target not in version:
                version[target] = copy.deepcopy(value)
        _fix_columns(version, f"spec.versions[{vname}]", notes)
    _migrate_conversion(spec, notes)
    preserve = spec.get("preserveUnknownFields")
    pruning_was_off = preserve is True or (from_v1beta1 and preserve is None)
    spec["preserveUnknownFields"] = False
    if pruning_was_off:
        notes.add(
            "changed",
            "spec.preserveUnknownFields",
            "set to false explicitly: pruning is on in v1. A CRD first created through "
            "v1beta1 keeps true on the server until a manifest sets false (an apply that "
            "omits it leaves true, and the server then rejects defaults and webhook "
            "conversion). Fields an object holds outside the schema are dropped on the next "
            "read and write; nodes that relied on this are marked "
            "x-kubernetes-preserve-unknown-fields",
        )
    for version in versions:
        vname = str(version.get("name", "?"))
        where = f"spec.versions[{vname}].schema.openAPIV3Schema"
        schema_holder = version.get("schema")
        schema = schema_holder.get("openAPIV3Schema") if isinstance(schema_holder, dict) else None
        if not isinstance(schema, dict):
            version["schema"] = {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            }
            notes.add(
                "needs-human" if not pruning_was_off else "changed",
                where,
                "the version had no schema; v1 requires one, so it accepts any fields "
                "(x-kubernetes-preserve-unknown-fields). Write a schema to get validation",
            )
            continue
        subresources = version.get("subresources")
        has_status = isinstance(subresources, Mapping) and "status" in subresources
        fixer = _SchemaFixer(
            schema,
            where,
            notes,
            pruning_was_off=pruning_was_off,
            keep_unknown=pruning_was_off and options.keep_unknown_fields,
        )
        fixed = fixer.fix_root(schema, has_status=has_status)
        if fixer.kept_open:
            notes.add(
                "changed",
                where,
                f"pruning stays off at {len(fixer.kept_open)} object node(s) "
                f"({', '.join(fixer.kept_open[:6])}{', ...' if len(fixer.kept_open) > 6 else ''}) "
                "so fields objects hold outside the schema survive; drop the marker where no "
                "object relies on undeclared fields (--prune-declared does it for all)",
            )
        elif pruning_was_off and not options.keep_unknown_fields:
            notes.add(
                "needs-human",
                where,
                "pruning is on for every node with declared fields: fields objects hold "
                "outside the schema are dropped on the next read or write; check the live "
                "objects before applying (setpoint snapshot before and after)",
            )
        version["schema"]["openAPIV3Schema"] = fixed
        for error in validate_structural(fixed, status_subresource=has_status):
            notes.add(
                "needs-human",
                f"{where}{_json_path(error.schema_path)}",
                f"{error.message}; fix: {error.fix}",
            )


def _versions(spec: dict[str, Any], notes: _Notes) -> list[dict[str, Any]]:
    versions = spec.get("versions")
    single = spec.pop("version", None)
    if not isinstance(versions, list) or not versions:
        if not isinstance(single, str):
            raise MigrationInputError("spec has neither versions nor version; name the versions")
        versions = [{"name": single, "served": True, "storage": True}]
        notes.add("changed", "spec.version", f"became versions: [{single}] (served, storage)")
    elif single is not None:
        first = versions[0].get("name") if isinstance(versions[0], Mapping) else None
        if single and single != first:
            notes.add(
                "needs-human",
                "spec.version",
                f"{single!r} is not the first of versions ({first!r}), which v1beta1 required; "
                "dropped. Check that versions lists every version, in the order you want",
            )
        else:
            notes.add("removed", "spec.version", "dropped; versions lists every version")
    clean: list[dict[str, Any]] = []
    for i, version in enumerate(versions):
        if not isinstance(version, dict):
            raise MigrationInputError(f"spec.versions[{i}] is not a mapping")
        clean.append(version)
        for flag in ("served", "storage"):
            if version.get(flag) is None:
                # Both are plain bools in v1beta1 and v1: a missing one reads as false.
                version[flag] = False
                notes.add(
                    "changed",
                    f"spec.versions[{version.get('name', i)}].{flag}",
                    "made explicit: false (a missing value reads as false)",
                )
    storage = [str(v.get("name")) for v in clean if v["storage"] is True]
    if len(storage) != 1:
        notes.add(
            "needs-human",
            "spec.versions",
            f"exactly one version must be the storage version, found {storage or 'none'}; "
            "set storage: true on the version objects are stored at",
        )
    spec["versions"] = clean
    return clean


def _approve_protected_group(crd: dict[str, Any], notes: _Notes) -> None:
    """v1 refuses a CRD of a *.k8s.io or *.kubernetes.io group without the approval annotation.

    v1beta1 let it be missing; the value ``unapproved, ...`` keeps the CRD acceptable the way
    it was, and a note asks for the real approval (a link to the API review).
    """
    group = str(crd["spec"].get("group", ""))
    protected = any(group == d or group.endswith("." + d) for d in ("k8s.io", "kubernetes.io"))
    metadata = crd.setdefault("metadata", {})
    if not protected or not isinstance(metadata, dict):
        return
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict) and _API_APPROVED in annotations:
        return
    if not isinstance(annotations, dict):
        annotations = metadata["annotations"] = {}
    annotations[_API_APPROVED] = "unapproved, migrated from v1beta1 by setpoint crd migrate"
    notes.add(
        "needs-human",
        f"metadata.annotations[{_API_APPROVED}]",
        f"group {group} is protected: v1 requires this annotation (v1beta1 did not). Set to "
        "'unapproved, ...' so the server accepts the CRD; replace it with the URL of the API "
        "review that approved the group, or move the kind to a group of your own",
    )


def _pop_top(spec: dict[str, Any], key: str) -> Any:
    value = spec.pop(key, None)
    if key == "validation" and isinstance(value, Mapping):
        return dict(value)
    return value


def _fix_columns(version: dict[str, Any], where: str, notes: _Notes) -> None:
    columns = version.get("additionalPrinterColumns")
    if not isinstance(columns, list):
        return
    for column in columns:
        if isinstance(column, dict) and "JSONPath" in column:
            column["jsonPath"] = column.pop("JSONPath")
            notes.add(
                "changed",
                f"{where}.additionalPrinterColumns[{column.get('name', '?')}]",
                "JSONPath -> jsonPath",
            )


def _migrate_conversion(spec: dict[str, Any], notes: _Notes) -> None:
    conversion = spec.get("conversion")
    if not isinstance(conversion, dict):
        return
    strategy = conversion.get("strategy") or "None"
    if conversion.get("strategy") != strategy:
        conversion["strategy"] = strategy
        notes.add("changed", "spec.conversion.strategy", "made explicit: None (v1 requires it)")
    client_config = conversion.pop("webhookClientConfig", None)
    review_versions = conversion.pop("conversionReviewVersions", None)
    if strategy != "Webhook":
        if client_config is not None or review_versions is not None:
            notes.add(
                "removed", "spec.conversion", "webhook settings without strategy Webhook dropped"
            )
        return
    webhook = conversion.setdefault("webhook", {})
    if client_config is not None:
        webhook["clientConfig"] = client_config
        notes.add(
            "changed",
            "spec.conversion.webhookClientConfig",
            "-> spec.conversion.webhook.clientConfig",
        )
    if review_versions is None and "conversionReviewVersions" not in webhook:
        webhook["conversionReviewVersions"] = ["v1beta1"]
        notes.add(
            "needs-human",
            "spec.conversion.webhook.conversionReviewVersions",
            "set to [v1beta1], v1beta1's implicit default, which v1 requires explicitly; if "
            "the webhook understands apiextensions.k8s.io/v1 ConversionReview, list v1 first",
        )
    if review_versions is not None:
        webhook["conversionReviewVersions"] = review_versions
        notes.add(
            "changed",
            "spec.conversion.conversionReviewVersions",
            "-> spec.conversion.webhook.conversionReviewVersions",
        )


def _json_path(schema_path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in schema_path)


# --------------------------------------------------------------------------- schema


class _SchemaFixer:
    """Rewrites one version's openAPIV3Schema into a structural v1 schema."""

    def __init__(
        self,
        root: Mapping[str, Any],
        where: str,
        notes: _Notes,
        *,
        pruning_was_off: bool,
        keep_unknown: bool,
    ) -> None:
        definitions = root.get("definitions")
        self.definitions: Mapping[str, Any] = (
            definitions if isinstance(definitions, Mapping) else {}
        )
        self.where = where
        self.notes = notes
        self.pruning_was_off = pruning_was_off
        self.keep_unknown = keep_unknown
        self.kept_open: list[str] = []

    def fix_root(self, schema: Mapping[str, Any], *, has_status: bool) -> dict[str, Any]:
        raw_props = schema.get("properties")
        meta = raw_props.get("metadata") if isinstance(raw_props, Mapping) else None
        if isinstance(meta, Mapping) and isinstance(raw_props, Mapping):
            # Fixed on its own below: at the root only name/generateName may be constrained.
            others = {k: v for k, v in raw_props.items() if k != "metadata"}
            node = self.fix({**schema, "properties": others}, "", level="root", ref_stack=())
            fixed_props = node.get("properties") or {}
            node["properties"] = {
                str(k): dict(meta) if k == "metadata" else fixed_props[str(k)] for k in raw_props
            }
        else:
            node = self.fix(schema, "", level="root", ref_stack=())
        if "definitions" in node:
            del node["definitions"]
            self.notes.add("removed", self.where + ".definitions", "inlined where referenced")
        if node.get("type") is None:
            node["type"] = "object"
            self.notes.add("changed", self.where, "added type: object at the root")
        if (
            self.pruning_was_off
            and not node.get("properties")
            and node.get("x-kubernetes-preserve-unknown-fields") is not True
        ):
            node["x-kubernetes-preserve-unknown-fields"] = True
            self.notes.add(
                "changed",
                self.where,
                "the root declares no fields: marked x-kubernetes-preserve-unknown-fields",
            )
        props = node.get("properties")
        if isinstance(props, dict):
            for meta_field in ("apiVersion", "kind"):
                sub = props.get(meta_field)
                if isinstance(sub, dict) and sub.get("type") != "string":
                    props[meta_field] = {"type": "string"}
                    self.notes.add(
                        "changed",
                        f"{self.where}.properties.{meta_field}",
                        "reduced to type: string (the server owns it)",
                    )
            meta = props.get("metadata")
            if isinstance(meta, dict):
                self._fix_root_metadata(meta)
        if "additionalProperties" in node:
            del node["additionalProperties"]
            self.notes.add(
                "needs-human",
                self.where + ".additionalProperties",
                "removed: a resource's root cannot be a map; declare spec and status",
            )
        if has_status:
            for key in sorted(k for k in node if k not in ROOT_KEYWORDS_WITH_STATUS):
                value = node.pop(key)
                self.notes.add(
                    "needs-human" if key not in ("title", "nullable") else "removed",
                    f"{self.where}.{key}",
                    f"removed {key}={_short(value)}: with the status subresource the root "
                    "allows only value-free keywords; move the constraint into spec or a CEL rule",
                )
        return node

    def _fix_root_metadata(self, meta: dict[str, Any]) -> None:
        where = self.where + ".properties.metadata"
        extra = [k for k in meta if k not in ("type", "properties")]
        for key in extra:
            del meta[key]
        props = meta.get("properties")
        kept: dict[str, Any] = {}
        if isinstance(props, Mapping):
            for key, value in props.items():
                if key in ("name", "generateName"):
                    kept[key] = value
                else:
                    extra.append(f"properties.{key}")
        if kept:
            meta["properties"] = kept
        else:
            meta.pop("properties", None)
        meta["type"] = "object"
        if extra:
            self.notes.add(
                "removed",
                where,
                f"constraints {extra} dropped: metadata at the root may only restrict name "
                "and generateName (use a CEL rule for labels or annotations)",
            )

    def fix(
        self,
        schema: Any,
        path: str,
        *,
        level: Literal["root", "field", "item", "junctor"],
        ref_stack: tuple[str, ...],
    ) -> dict[str, Any]:
        where = self.where + path
        if not isinstance(schema, Mapping):
            self.notes.add(
                "needs-human",
                where,
                f"the schema node is {_short(schema)}, not an object; it now accepts any value",
            )
            return {"x-kubernetes-preserve-unknown-fields": True}
        node: dict[str, Any] = dict(schema)
        if "$ref" in node:
            node = self._inline_ref(node, where, ref_stack)
            ref_stack = (*ref_stack, str(schema.get("$ref")))
        self._rename(node, where)
        self._fix_type(node, where, level)
        self._drop_unsupported(node, where, level)
        if level == "junctor":
            for key in JUNCTOR_FORBIDDEN_KEYWORDS:
                if key in node:
                    value = node.pop(key)
                    self.notes.add(
                        "removed" if key in ("description", "title") else "needs-human",
                        f"{where}.{key}",
                        f"removed {key}={_short(value)}: not allowed inside allOf/anyOf/oneOf/not; "
                        "declare it on the field itself",
                    )
        # Recurse.
        props = node.get("properties")
        if isinstance(props, Mapping):
            child_level: Literal["field", "junctor"] = "junctor" if level == "junctor" else "field"
            node["properties"] = {
                str(name): self.fix(
                    sub, f"{path}.properties.{name}", level=child_level, ref_stack=ref_stack
                )
                for name, sub in props.items()
            }
        items = node.get("items")
        if isinstance(items, list):
            node["items"] = self._tuple_items(items, where)
            items = node["items"]
        if isinstance(items, Mapping):
            node["items"] = self.fix(
                items,
                f"{path}.items",
                level="junctor" if level == "junctor" else "item",
                ref_stack=ref_stack,
            )
        additional = node.get("additionalProperties")
        if isinstance(additional, Mapping):
            node["additionalProperties"] = self.fix(
                additional,
                f"{path}.additionalProperties",
                level="junctor" if level == "junctor" else "field",
                ref_stack=ref_stack,
            )
        for junctor in ("allOf", "anyOf", "oneOf"):
            branches = node.get(junctor)
            if isinstance(branches, list):
                node[junctor] = [
                    b
                    if _sanctioned_int_or_string(node, junctor, i)
                    else self.fix(b, f"{path}.{junctor}[{i}]", level="junctor", ref_stack=ref_stack)
                    for i, b in enumerate(branches)
                ]
        if isinstance(node.get("not"), Mapping):
            node["not"] = self.fix(node["not"], f"{path}.not", level="junctor", ref_stack=ref_stack)
        if level != "junctor":
            self._fix_structure(node, where, level)
        if "type" in node:  # type first, as people write it
            node = {"type": node.pop("type"), **node}
        return node

    # -- individual fixes

    def _inline_ref(
        self, node: dict[str, Any], where: str, ref_stack: tuple[str, ...]
    ) -> dict[str, Any]:
        ref = node.pop("$ref")
        prefix = "#/definitions/"
        target = None
        if isinstance(ref, str) and ref.startswith(prefix):
            target = self.definitions.get(ref[len(prefix) :])
        if isinstance(target, Mapping) and ref not in ref_stack and len(ref_stack) < _MAX_REF_DEPTH:
            merged = {**copy.deepcopy(dict(target)), **node}
            self.notes.add("changed", where, f"$ref {ref} inlined")
            return merged
        reason = "recursive" if ref in ref_stack else "not a local #/definitions/ reference"
        self.notes.add(
            "needs-human",
            where,
            f"$ref {_short(ref)} removed ({reason}); the field now keeps any value "
            "(x-kubernetes-preserve-unknown-fields); describe it inline",
        )
        node.setdefault("x-kubernetes-preserve-unknown-fields", True)
        if isinstance(target, Mapping) and target.get("type") == "object":
            node.setdefault("type", "object")
        return node

    def _rename(self, node: dict[str, Any], where: str) -> None:
        if "x-example" in node:
            value = node.pop("x-example")
            node.setdefault("example", value)
            self.notes.add("changed", f"{where}.x-example", "-> example")
        if "x-nullable" in node:
            value = node.pop("x-nullable")
            if value is True:
                node["nullable"] = True
            self.notes.add("changed", f"{where}.x-nullable", "-> nullable")

    def _fix_type(self, node: dict[str, Any], where: str, level: str) -> None:
        node_type = node.get("type")
        if isinstance(node_type, str) and node_type != "null":
            return
        if node_type is None:
            return
        types = node_type if isinstance(node_type, list) else [node_type]
        non_null = [t for t in types if t != "null"]
        nullable = len(non_null) != len(types)
        if nullable:
            node["nullable"] = True
        if len(non_null) == 1 and isinstance(non_null[0], str):
            node["type"] = non_null[0]
            self.notes.add(
                "changed", f"{where}.type", f"{_short(node_type)} -> {non_null[0]} + nullable: true"
            )
        elif sorted(map(str, non_null)) == ["integer", "string"]:
            del node["type"]
            node["x-kubernetes-int-or-string"] = True
            self.notes.add(
                "changed", f"{where}.type", f"{_short(node_type)} -> x-kubernetes-int-or-string"
            )
        else:
            del node["type"]
            if level != "junctor":
                node["x-kubernetes-preserve-unknown-fields"] = True
            self.notes.add(
                "needs-human",
                f"{where}.type",
                f"{_short(node_type)} has no single v1 type: the field now keeps any value; "
                "pick one type (or use a CEL rule)",
            )

    def _drop_unsupported(self, node: dict[str, Any], where: str, level: str) -> None:
        if node.get("uniqueItems") is True:
            del node["uniqueItems"]
            items = node.get("items")
            item_type = items.get("type") if isinstance(items, Mapping) else None
            if item_type in _SCALAR_TYPES and level != "junctor":
                node.setdefault("x-kubernetes-list-type", "set")
                self.notes.add(
                    "changed",
                    f"{where}.uniqueItems",
                    "-> x-kubernetes-list-type: set (the server rejects duplicates)",
                )
            else:
                self.notes.add(
                    "needs-human",
                    f"{where}.uniqueItems",
                    "removed (forbidden in v1): duplicates are no longer rejected; use "
                    "x-kubernetes-list-type: set with atomic items, or list-type map with keys",
                )
        elif node.get("uniqueItems") is False:
            del node["uniqueItems"]
        if node.get("additionalProperties") is False:
            del node["additionalProperties"]
            self.notes.add(
                "changed",
                f"{where}.additionalProperties",
                "removed false: v1 prunes unknown fields instead of rejecting them",
            )
        if node.get("additionalProperties") is True:
            del node["additionalProperties"]
            if level != "junctor":
                node["x-kubernetes-preserve-unknown-fields"] = True
            self.notes.add(
                "changed",
                f"{where}.additionalProperties",
                "true -> x-kubernetes-preserve-unknown-fields: true (extra keys are kept)",
            )
        pattern_props = node.pop("patternProperties", None)
        if pattern_props is not None:
            if (
                isinstance(pattern_props, Mapping)
                and len(pattern_props) == 1
                and "properties" not in node
                and "additionalProperties" not in node
            ):
                (key_pattern, value_schema), *_ = pattern_props.items()
                node["additionalProperties"] = value_schema
                self.notes.add(
                    "needs-human",
                    f"{where}.patternProperties",
                    f"-> additionalProperties; map keys are no longer checked against "
                    f"{_short(key_pattern)}: add a CEL rule such as "
                    f"self.all(k, k.matches(...)) with maxProperties to bound its cost",
                )
            else:
                self.notes.add(
                    "needs-human",
                    f"{where}.patternProperties",
                    "removed (not supported in v1); declare the keys as properties, or a map "
                    "(additionalProperties) with a CEL rule on the keys",
                )
        if "dependencies" in node:
            node.pop("dependencies")
            self.notes.add(
                "needs-human",
                f"{where}.dependencies",
                "removed (not supported in v1); relate the fields with a CEL rule "
                "(x-kubernetes-validations), e.g. !has(self.a) || has(self.b)",
            )
        for key in ("additionalItems", "id", "$schema"):
            if key in node:
                node.pop(key)
                self.notes.add("removed", f"{where}.{key}", "not supported in v1; dropped")
        if "definitions" in node and level != "root":
            node.pop("definitions")
            self.notes.add("removed", f"{where}.definitions", "only the root may hold them")
        for key in sorted(k for k in node if k not in SCHEMA_KEYWORDS and k != "definitions"):
            value = node.pop(key)
            self.notes.add(
                "removed",
                f"{where}.{key}",
                f"{key}={_short(value)} is not a v1 schema keyword; dropped",
            )

    def _tuple_items(self, items: list[Any], where: str) -> Any:
        if len(items) == 1:
            self.notes.add("changed", f"{where}.items", "a one-schema list -> that schema")
            return items[0]
        self.notes.add(
            "needs-human",
            f"{where}.items",
            "tuple items are not supported in v1: the items now keep any value; give every "
            "item one schema",
        )
        return {"x-kubernetes-preserve-unknown-fields": True}

    def _fix_structure(self, node: dict[str, Any], where: str, level: str) -> None:
        preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        if node.get("type") is None and not int_or_string:
            if "properties" in node or "additionalProperties" in node:
                node["type"] = "object"
                self.notes.add("changed", f"{where}.type", "added type: object (it has fields)")
            elif "items" in node:
                node["type"] = "array"
                self.notes.add("changed", f"{where}.type", "added type: array (it has items)")
            elif level != "root" and not preserve:
                node["x-kubernetes-preserve-unknown-fields"] = True
                preserve = True
                self.notes.add(
                    "changed",
                    where,
                    "no type: marked x-kubernetes-preserve-unknown-fields so it keeps any "
                    "value as before (give it a type to get validation)",
                )
        if node.get("type") == "array" and "items" not in node:
            node["items"] = {"x-kubernetes-preserve-unknown-fields": True}
            self.notes.add("changed", f"{where}.items", "added: items keep any value as before")
        if isinstance(node.get("properties"), Mapping) and isinstance(
            node.get("additionalProperties"), Mapping
        ):
            del node["additionalProperties"]
            self.notes.add(
                "needs-human",
                f"{where}.additionalProperties",
                "removed: v1 forbids properties and additionalProperties together; fields "
                "outside properties are now pruned",
            )
        free_form = (
            self.pruning_was_off
            and node.get("type") == "object"
            and "properties" not in node
            and "additionalProperties" not in node
            and not preserve
            and not where.endswith(".properties.metadata")
        )
        declared_but_open = (
            self.keep_unknown
            and node.get("type") == "object"
            and isinstance(node.get("properties"), Mapping)
            and not preserve
            and not where.endswith(".properties.metadata")
        )
        if declared_but_open:
            node["x-kubernetes-preserve-unknown-fields"] = True
            self.kept_open.append(where[len(self.where) :] or "(root)")
        if free_form:
            node["x-kubernetes-preserve-unknown-fields"] = True
            self.notes.add(
                "changed",
                where,
                "an object without declared fields relied on pruning being off: marked "
                "x-kubernetes-preserve-unknown-fields",
            )


_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
"""The one junctor with types v1 allows: beside ``x-kubernetes-int-or-string`` (controller-gen)."""


def _sanctioned_int_or_string(node: Mapping[str, Any], junctor: str, index: int) -> bool:
    """Whether ``node[junctor][index]`` is the int-or-string pattern the structural rules allow.

    ``anyOf: [{type: integer}, {type: string}]`` on an int-or-string node, or that anyOf as
    the first ``allOf`` branch, as :func:`setpoint.crd.validate_structural` accepts it.
    """
    if node.get("x-kubernetes-int-or-string") is not True:
        return False
    if junctor == "anyOf":
        return node.get("anyOf") == _INT_OR_STRING_ANY_OF
    branches = node.get("allOf")
    return (
        junctor == "allOf"
        and index == 0
        and isinstance(branches, list)
        and isinstance(branches[0], Mapping)
        and branches[0].get("anyOf") == _INT_OR_STRING_ANY_OF
    )


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "<large number>"
    return text if len(text) <= 60 else text[:57] + "..."
