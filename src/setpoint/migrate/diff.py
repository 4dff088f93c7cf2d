"""Breaking-change detection between two versions of a CRD (``setpoint crd diff OLD NEW``).

:func:`diff_crds` compares two CustomResourceDefinitions and returns one
:class:`Finding` per incompatible (or suspicious) change, each carrying the
name of the check that found it. The checks cover everything crdify checks
and more:

=======================  ==============================================================
check                    finds (default level)
=======================  ==============================================================
``scope``                scope changed (error)
``names``                kind, plural or group changed (error); short names or
                         categories removed (warn)
``storedVersionRemoval`` a version still in ``status.storedVersions`` (or, for a file,
                         the storage version) is gone (error)
``servedVersionRemoval`` a served version is gone or no longer served (error)
``storageVersionChange`` the storage version changed: stored objects need migrating
                         (warn)
``subresources``         the status or scale subresource removed or changed (error)
``conversion``           the conversion strategy changed (warn)
``existingFieldRemoval`` a field removed from a version's schema (error)
``type``                 a field's type changed, int-or-string included (error)
``enum``                 an enum added to a field, or values removed (error)
``enumAddition``         values added to an enum (warn; configurable like crdify's
                         additionPolicy)
``required``             a field became required (error)
``maximum``,             a maximum added or lowered (exclusive included); for
``maxLength``,           lengths, items and properties likewise (error)
``maxItems``,
``maxProperties``
``minimum``,             a minimum added or raised (error)
``minLength``, ...
``multipleOf``           multipleOf added, or changed to a value the old one is not a
                         multiple of (error)
``default``              a default added, changed or removed (error)
``pattern``              a pattern added or changed (error)
``nullable``             nullable removed (error)
``format``               a format added or changed (warn)
``validationRules``      a CEL rule added or changed (error)
``listType``             list type or map keys changed (error)
``mapType``              map type changed (warn)
``preserveUnknownFields``  x-kubernetes-preserve-unknown-fields removed: pruning
                         starts dropping fields (error)
``embeddedResource``     x-kubernetes-embedded-resource changed (error)
``additionalProperties`` a map's value schema removed (error)
``junctors``             allOf/anyOf/oneOf/not changed: not provably compatible (error)
``unhandled``            a keyword no check understands changed: fail closed (error)
``servedVersionDrift``   two served versions of NEW differ incompatibly (warn): what a
                         client sees when it switches version
``unboundedString``,     best practice, ratcheted (only where new since OLD): a string
``unboundedList``,       without maxLength/enum, a list without maxItems, a map
``unboundedMap``         without maxProperties (warn)
=======================  ==============================================================

Every schema keyword is owned by exactly one comparator; a keyword none owns
that differs between OLD and NEW is reported as ``unhandled``, so a new
Kubernetes keyword can never slip through as "compatible". Levels per check
come from :class:`DiffConfig` (``error``, ``warn``, ``off``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from setpoint.api.errors import SetpointError

__all__ = [
    "CHECKS",
    "DiffConfig",
    "DiffConfigError",
    "Finding",
    "Level",
    "diff_crds",
]

Level = Literal["error", "warn", "off"]

CHECKS: dict[str, Level] = {
    "scope": "error",
    "names": "error",
    "crdRemoval": "error",
    "storedVersionRemoval": "error",
    "servedVersionRemoval": "error",
    "storageVersionChange": "warn",
    "subresources": "error",
    "conversion": "warn",
    "existingFieldRemoval": "error",
    "type": "error",
    "enum": "error",
    "enumAddition": "warn",
    "required": "error",
    "maximum": "error",
    "maxLength": "error",
    "maxItems": "error",
    "maxProperties": "error",
    "minimum": "error",
    "minLength": "error",
    "minItems": "error",
    "minProperties": "error",
    "multipleOf": "error",
    "default": "error",
    "pattern": "error",
    "nullable": "error",
    "format": "warn",
    "validationRules": "error",
    "listType": "error",
    "mapType": "warn",
    "preserveUnknownFields": "error",
    "embeddedResource": "error",
    "additionalProperties": "error",
    "junctors": "error",
    "unhandled": "error",
    "servedVersionDrift": "warn",
    "unboundedString": "warn",
    "unboundedList": "warn",
    "unboundedMap": "warn",
}
"""Every check and its default level."""

_LEVELS = ("error", "warn", "off")


class DiffConfigError(SetpointError, ValueError):
    """The diff configuration is invalid; the message names the key and the allowed values."""


@dataclass(frozen=True, kw_only=True)
class DiffConfig:
    """Levels per check (defaults in :data:`CHECKS`).

    Load one from YAML with :meth:`from_mapping`::

        checks:
          enumAddition: error     # crdify's additionPolicy: Disallow
          unboundedString: off
    """

    levels: Mapping[str, Level] = field(default_factory=dict)
    """Overrides of :data:`CHECKS`, by check name."""

    def __post_init__(self) -> None:
        for name, level in self.levels.items():
            if name not in CHECKS:
                raise DiffConfigError(
                    f"checks.{name}: unknown check; known checks: {', '.join(sorted(CHECKS))}"
                )
            if level not in _LEVELS:
                raise DiffConfigError(
                    f"checks.{name}: level {level!r} is not one of {', '.join(_LEVELS)}"
                )

    def level(self, check: str) -> Level:
        """The level ``check`` reports at."""
        return self.levels.get(check, CHECKS[check])

    @classmethod
    def from_mapping(cls, data: Any) -> DiffConfig:
        """A config from parsed YAML/JSON: ``{"checks": {name: level}}``.

        Raises:
            DiffConfigError: the document has another shape, an unknown check or level.

        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping) or set(data) - {"checks"}:
            raise DiffConfigError("the config must be a mapping with one key, checks")
        checks = data.get("checks") or {}
        if not isinstance(checks, Mapping):
            raise DiffConfigError("checks must map check names to error, warn or off")
        levels: dict[str, Level] = {}
        for name, level in checks.items():
            # YAML 1.1 reads a bare `off` as false.
            levels[str(name)] = "off" if level is False else level
        return cls(levels=levels)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One change a check considers incompatible or worth a look."""

    check: str
    """The check's name (a key of :data:`CHECKS`)."""
    level: Level
    """``error`` or ``warn`` (``off`` findings are not returned)."""
    crd: str
    """The CRD's name."""
    version: str | None
    """The CRD version the change is in, or ``None`` for CRD-wide changes."""
    path: str
    """The field path (``.spec.replicas``), or the CRD field for CRD-wide changes."""
    message: str
    """What changed and why it matters."""

    def __str__(self) -> str:
        where = f"{self.crd} {self.version}" if self.version else self.crd
        return f"{self.level.upper()} [{self.check}] {where} {self.path}: {self.message}"


class _Collector:
    def __init__(self, config: DiffConfig, crd: str) -> None:
        self.config = config
        self.crd = crd
        self.findings: list[Finding] = []
        self.version: str | None = None
        self.rename: str | None = None  # wraps property findings as another check

    def add(self, check: str, path: str, message: str) -> None:
        name = self.rename or check
        if self.rename:
            message = f"[{check}] {message}"
        level = self.config.level(name)
        if level == "off":
            return
        self.findings.append(
            Finding(
                check=name,
                level=level,
                crd=self.crd,
                version=self.version,
                path=path or ".",
                message=message,
            )
        )


def diff_crds(
    old: Iterable[Mapping[str, Any]],
    new: Iterable[Mapping[str, Any]],
    *,
    config: DiffConfig | None = None,
) -> list[Finding]:
    """Compare CRDs by name; return the findings, errors first.

    A CRD only in ``old`` is reported (``crdRemoval``); one only in ``new`` is
    new and has nothing to be compatible with (best-practice checks still run).
    """
    config = config or DiffConfig()
    old_by_name = {str(c["metadata"]["name"]): c for c in old}
    new_by_name = {str(c["metadata"]["name"]): c for c in new}
    findings: list[Finding] = []
    for name in old_by_name:
        if name not in new_by_name:
            out = _Collector(config, name)
            out.add("crdRemoval", "metadata.name", "the CRD is gone: every object of it is lost")
            findings += out.findings
    for name, new_crd in new_by_name.items():
        findings += _diff_crd(old_by_name.get(name), new_crd, config, name)
    order = {"error": 0, "warn": 1}
    return sorted(findings, key=lambda f: (order[f.level], f.crd, f.version or "", f.path))


# --------------------------------------------------------------------------- CRD level


def _versions(crd: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(v["name"]): v for v in crd.get("spec", {}).get("versions") or ()}


def _schema(version: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    return schema if isinstance(schema, Mapping) else {}


def _storage(crd: Mapping[str, Any]) -> str | None:
    for name, version in _versions(crd).items():
        if version.get("storage"):
            return name
    return None


def _diff_crd(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], config: DiffConfig, name: str
) -> list[Finding]:
    out = _Collector(config, name)
    new_versions = _versions(new)
    if old is not None:
        old_spec, new_spec = old.get("spec", {}), new.get("spec", {})
        old_versions = _versions(old)
        if old_spec.get("scope", "Namespaced") != new_spec.get("scope", "Namespaced"):
            out.add(
                "scope",
                "spec.scope",
                f"{old_spec.get('scope', 'Namespaced')} -> {new_spec.get('scope', 'Namespaced')}: "
                "every object's URL and identity changes",
            )
        old_names, new_names = old_spec.get("names", {}), new_spec.get("names", {})
        for key in ("kind", "plural", "listKind", "singular"):
            if key in old_names and old_names.get(key) != new_names.get(key):
                out.add(
                    "names",
                    f"spec.names.{key}",
                    f"{old_names.get(key)!r} -> {new_names.get(key)!r}: clients address it by name",
                )
        if old_spec.get("group") != new_spec.get("group"):
            out.add("names", "spec.group", f"{old_spec.get('group')} -> {new_spec.get('group')}")
        for key in ("shortNames", "categories"):
            gone = sorted(set(old_names.get(key) or ()) - set(new_names.get(key) or ()))
            if gone:
                out.add("names", f"spec.names.{key}", f"{gone} removed: kubectl users rely on them")
        stored = list((old.get("status") or {}).get("storedVersions") or ())
        if not stored and _storage(old):
            stored = [str(_storage(old))]
        for version in stored:
            if version not in new_versions:
                out.add(
                    "storedVersionRemoval",
                    "spec.versions",
                    f"{version} is in status.storedVersions but gone from the new CRD: the server "
                    "refuses this; run `setpoint crd migrate-storage` first, which moves every "
                    "object to the storage version and then drops it from storedVersions",
                )
        for vname, version in old_versions.items():
            if not version.get("served", True):
                continue
            new_version = new_versions.get(vname)
            if new_version is None or not new_version.get("served", True):
                out.add(
                    "servedVersionRemoval",
                    "spec.versions",
                    f"{vname} is no longer served: clients still using it break",
                )
        old_storage, new_storage = _storage(old), _storage(new)
        if old_storage and new_storage and old_storage != new_storage:
            out.add(
                "storageVersionChange",
                "spec.versions",
                f"storage {old_storage} -> {new_storage}: existing objects stay stored at "
                f"{old_storage} until migrated (setpoint crd migrate-storage)",
            )
        old_conv = (old_spec.get("conversion") or {}).get("strategy", "None")
        new_conv = (new_spec.get("conversion") or {}).get("strategy", "None")
        if old_conv != new_conv:
            out.add("conversion", "spec.conversion.strategy", f"{old_conv} -> {new_conv}")
        for vname, old_version in old_versions.items():
            new_version = new_versions.get(vname)
            if new_version is None:
                continue
            out.version = vname
            _diff_subresources(old_version, new_version, out)
            _compare(_schema(old_version), _schema(new_version), "", out)
            _best_practice(_schema(new_version), _schema(old_version), "", out)
            out.version = None
    else:
        old_versions = {}
    for vname, version in new_versions.items():
        if vname not in old_versions:
            out.version = vname
            _best_practice(_schema(version), None, "", out)
            out.version = None
    _served_drift(new, out)
    return out.findings


def _diff_subresources(old: Mapping[str, Any], new: Mapping[str, Any], out: _Collector) -> None:
    old_sub, new_sub = old.get("subresources") or {}, new.get("subresources") or {}
    if "status" in old_sub and "status" not in new_sub:
        out.add(
            "subresources",
            "subresources.status",
            "removed: status writes through /status fail, and spec writes start changing status",
        )
    if "scale" in old_sub:
        if "scale" not in new_sub:
            out.add("subresources", "subresources.scale", "removed: autoscalers stop working")
        elif old_sub["scale"] != new_sub["scale"]:
            out.add(
                "subresources",
                "subresources.scale",
                f"{old_sub['scale']} -> {new_sub['scale']}: autoscalers read other fields",
            )


def _served_drift(crd: Mapping[str, Any], out: _Collector) -> None:
    """Compare consecutive served versions of one CRD: what a client switching sees."""
    from setpoint.api.declaration import version_priority

    # Oldest first: the reverse of the server's preference order (GA, beta, alpha).
    served = sorted(
        (n for n, v in _versions(crd).items() if v.get("served", True)),
        key=version_priority,
        reverse=True,
    )
    versions = _versions(crd)
    out.rename = "servedVersionDrift"
    for older, newer in itertools.pairwise(served):
        out.version = f"{older}->{newer}"
        _compare(_schema(versions[older]), _schema(versions[newer]), "", out)
    out.version = None
    out.rename = None


# --------------------------------------------------------------------------- schema level

Comparator = Callable[[Mapping[str, Any], Mapping[str, Any], str, "_Collector"], None]


def _compare(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    """Run every keyword's comparator; report keywords no comparator owns (fail closed)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        if old != new:
            out.add("unhandled", path, "a schema node is not an object; cannot compare")
        return
    handled: set[str] = set()
    for keywords, comparator in _COMPARATORS:
        if any(k in old or k in new for k in keywords):
            comparator(old, new, path, out)
        handled.update(keywords)
    for key in sorted(set(old) | set(new), key=str):
        if key not in handled and old.get(key) != new.get(key):
            out.add(
                "unhandled",
                f"{path}.{key}" if path else str(key),
                f"{key!r} changed and no check understands it: {_short(old.get(key))} -> "
                f"{_short(new.get(key))}",
            )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _field(path: str) -> str:
    return path or "."


def _cmp_type(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    old_t = "int-or-string" if old.get("x-kubernetes-int-or-string") else old.get("type")
    new_t = "int-or-string" if new.get("x-kubernetes-int-or-string") else new.get("type")
    if old_t == new_t:
        return
    if old_t is None and old.get("x-kubernetes-preserve-unknown-fields"):
        out.add("type", _field(path), f"any value -> {new_t}: stored values of other types fail")
        return
    if old_t == "integer" and new_t in ("number", "int-or-string"):
        return  # every integer is still valid
    out.add("type", _field(path), f"{old_t} -> {new_t}: stored values no longer validate")


def _cmp_enum(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    old_e, new_e = old.get("enum"), new.get("enum")
    if new_e is None:
        return  # constraint dropped: widening
    if old_e is None:
        out.add("enum", _field(path), f"enum {_short(new_e)} added: other stored values fail")
        return
    removed = [v for v in old_e if v not in new_e]
    added = [v for v in new_e if v not in old_e]
    if removed:
        out.add("enum", _field(path), f"values {_short(removed)} removed: stored ones fail")
    if added:
        out.add(
            "enumAddition",
            _field(path),
            f"values {_short(added)} added: clients that switch over the old set meet new values",
        )


def _cmp_required(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    added = sorted(set(new.get("required") or ()) - set(old.get("required") or ()))
    props = new.get("properties") or {}
    for name in added:
        has_default = isinstance(props.get(name), Mapping) and "default" in props[name]
        out.add(
            "required",
            f"{path}.{name}",
            "became required"
            + (
                " (it has a default, so writes fill it, but stored objects without it still read "
                "back without it)"
                if has_default
                else ": objects without it can no longer be written"
            ),
        )


def _bound(
    check: str, key: str, exclusive: str | None, *, upper: bool
) -> tuple[tuple[str, ...], Comparator]:
    def compare(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
        ov, nv = old.get(key), new.get(key)
        oex = bool(old.get(exclusive)) if exclusive else False
        nex = bool(new.get(exclusive)) if exclusive else False
        if nv is None:
            return
        if ov is None:
            out.add(
                check,
                _field(path),
                f"{key} {nv} added: stored values {'above' if upper else 'below'} it fail",
            )
            return
        tighter = (nv < ov) if upper else (nv > ov)
        if tighter or (nv == ov and nex and not oex):
            shown = f"{'exclusive ' if oex else ''}{ov} -> {'exclusive ' if nex else ''}{nv}"
            out.add(check, _field(path), f"{key} tightened ({shown}): stored values may fail")

    keys = (key, exclusive) if exclusive else (key,)
    return keys, compare


def _cmp_multiple(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    ov, nv = old.get("multipleOf"), new.get("multipleOf")
    if nv is None or ov == nv:
        return
    if ov is not None:
        try:
            if (Fraction(ov) / Fraction(nv)).denominator == 1:
                return  # every multiple of ov is a multiple of nv
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            pass
    out.add("multipleOf", _field(path), f"multipleOf {ov} -> {nv}: stored values may fail")


def _cmp_default(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    if "default" not in old and "default" in new:
        out.add(
            "default",
            _field(path),
            f"default {_short(new['default'])} added: objects written without the field change "
            "meaning, and stored ones read back with it",
        )
    elif "default" in old and "default" not in new:
        out.add("default", _field(path), f"default {_short(old['default'])} removed")
    elif "default" in old and old["default"] != new["default"]:
        out.add(
            "default",
            _field(path),
            f"default {_short(old['default'])} -> {_short(new['default'])}",
        )


def _cmp_pattern(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    if "pattern" in new and old.get("pattern") != new["pattern"]:
        what = "added" if "pattern" not in old else f"changed from {old['pattern']!r}"
        out.add(
            "pattern", _field(path), f"pattern {new['pattern']!r} {what}: stored values may fail"
        )


def _cmp_nullable(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    if old.get("nullable") is True and new.get("nullable") is not True:
        out.add("nullable", _field(path), "no longer nullable: stored nulls fail (or are pruned)")


def _cmp_format(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    if "format" in new and old.get("format") != new["format"]:
        out.add("format", _field(path), f"format {old.get('format')} -> {new['format']}")


def _cmp_rules(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    old_rules = {_rule_key(r): r for r in old.get("x-kubernetes-validations") or ()}
    for rule in new.get("x-kubernetes-validations") or ():
        key = _rule_key(rule)
        if key in old_rules:
            continue
        text = rule.get("rule") if isinstance(rule, Mapping) else rule
        ratchet = (
            " (transition rule: only checked on updates)"
            if isinstance(text, str) and "oldSelf" in text
            else ""
        )
        out.add(
            "validationRules",
            _field(path),
            f"CEL rule {text!r} added or changed{ratchet}: stored objects may fail it; "
            "check them with --against-cluster",
        )


def _rule_key(rule: Any) -> Any:
    if isinstance(rule, Mapping):
        return (rule.get("rule"), rule.get("optionalOldSelf"))
    return repr(rule)


def _cmp_list_type(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    old_t = old.get("x-kubernetes-list-type", "atomic" if old.get("type") == "array" else None)
    new_t = new.get("x-kubernetes-list-type", "atomic" if new.get("type") == "array" else None)
    if old_t != new_t and new_t is not None:
        out.add(
            "listType",
            _field(path),
            f"list type {old_t} -> {new_t}: duplicates or merge behaviour change",
        )
    old_k, new_k = old.get("x-kubernetes-list-map-keys"), new.get("x-kubernetes-list-map-keys")
    if old_k != new_k and new_k is not None and old_t == new_t:
        out.add("listType", _field(path), f"map keys {old_k} -> {new_k}")


def _cmp_map_type(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    if old.get("x-kubernetes-map-type") != new.get("x-kubernetes-map-type"):
        out.add(
            "mapType",
            _field(path),
            f"map type {old.get('x-kubernetes-map-type')} -> {new.get('x-kubernetes-map-type')}: "
            "server-side apply merges it differently",
        )


def _cmp_preserve(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    if old.get("x-kubernetes-preserve-unknown-fields") and not new.get(
        "x-kubernetes-preserve-unknown-fields"
    ):
        out.add(
            "preserveUnknownFields",
            _field(path),
            "x-kubernetes-preserve-unknown-fields removed: fields outside the schema are now "
            "pruned from stored objects on the next read and write",
        )


def _cmp_embedded(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    if bool(old.get("x-kubernetes-embedded-resource")) != bool(
        new.get("x-kubernetes-embedded-resource")
    ):
        out.add("embeddedResource", _field(path), "x-kubernetes-embedded-resource changed")


def _cmp_properties(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    old_props = old.get("properties") or {}
    new_props = new.get("properties") or {}
    if not isinstance(old_props, Mapping) or not isinstance(new_props, Mapping):
        if old_props != new_props:
            out.add("unhandled", _field(path), "properties is not a mapping; cannot compare")
        return
    for name, old_sub in old_props.items():
        sub_path = f"{path}.{name}"
        if name not in new_props:
            if path == "" and name in ("apiVersion", "kind", "metadata"):
                continue  # the server owns these
            out.add(
                "existingFieldRemoval",
                sub_path,
                "removed: clients reading or writing it break, and stored values are pruned",
            )
            continue
        _compare(old_sub, new_props[name], sub_path, out)


def _cmp_items(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    if "items" in old and "items" in new:
        _compare(old["items"], new["items"], f"{path}[*]", out)
    elif "items" in old:
        out.add("type", f"{path}[*]", "the items schema was removed")


def _cmp_additional(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    old_a, new_a = old.get("additionalProperties"), new.get("additionalProperties")
    if isinstance(old_a, Mapping) and isinstance(new_a, Mapping):
        _compare(old_a, new_a, f"{path}[*]", out)
    elif old_a is not None and new_a is None and not new.get("properties"):
        out.add(
            "additionalProperties",
            _field(path),
            "the map's value schema was removed: its entries are pruned",
        )
    elif old_a != new_a and new_a is not None:
        out.add("additionalProperties", _field(path), f"{_short(old_a)} -> {_short(new_a)}")


def _cmp_junctors(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector
) -> None:
    int_or_string = [{"type": "integer"}, {"type": "string"}]
    for key in ("allOf", "anyOf", "oneOf", "not"):
        ov, nv = old.get(key), new.get(key)
        if key == "anyOf" and new.get("x-kubernetes-int-or-string") and nv == int_or_string:
            continue  # the generated form of int-or-string
        if nv is not None and ov != nv:
            out.add(
                "junctors",
                _field(path),
                f"{key} changed: setpoint cannot prove the change compatible; review it",
            )


def _ignore(old: Mapping[str, Any], new: Mapping[str, Any], path: str, out: _Collector) -> None:
    """Documentation keywords: they never make an object invalid."""


_COMPARATORS: list[tuple[tuple[str, ...], Comparator]] = [
    (("type", "x-kubernetes-int-or-string"), _cmp_type),
    (("enum",), _cmp_enum),
    (("required",), _cmp_required),
    _bound("maximum", "maximum", "exclusiveMaximum", upper=True),
    _bound("minimum", "minimum", "exclusiveMinimum", upper=False),
    _bound("maxLength", "maxLength", None, upper=True),
    _bound("minLength", "minLength", None, upper=False),
    _bound("maxItems", "maxItems", None, upper=True),
    _bound("minItems", "minItems", None, upper=False),
    _bound("maxProperties", "maxProperties", None, upper=True),
    _bound("minProperties", "minProperties", None, upper=False),
    (("multipleOf",), _cmp_multiple),
    (("default",), _cmp_default),
    (("pattern",), _cmp_pattern),
    (("nullable",), _cmp_nullable),
    (("format",), _cmp_format),
    (("x-kubernetes-validations",), _cmp_rules),
    (("x-kubernetes-list-type", "x-kubernetes-list-map-keys"), _cmp_list_type),
    (("x-kubernetes-map-type",), _cmp_map_type),
    (("x-kubernetes-preserve-unknown-fields",), _cmp_preserve),
    (("x-kubernetes-embedded-resource",), _cmp_embedded),
    (("properties",), _cmp_properties),
    (("items",), _cmp_items),
    (("additionalProperties",), _cmp_additional),
    (("allOf", "anyOf", "oneOf", "not"), _cmp_junctors),
    (("description", "title", "example", "externalDocs"), _ignore),
]
"""Each schema keyword's one comparator. ``uniqueItems`` is deliberately absent: CRDs may
not set it to true, so any change to it is ``unhandled``."""


# --------------------------------------------------------------------------- best practice


def _unbounded_string(node: Mapping[str, Any]) -> bool:
    return node.get("type") == "string" and not {"maxLength", "enum", "format"} & set(node)


def _unbounded_list(node: Mapping[str, Any]) -> bool:
    return node.get("type") == "array" and "maxItems" not in node


def _unbounded_map(node: Mapping[str, Any]) -> bool:
    return isinstance(node.get("additionalProperties"), Mapping) and "maxProperties" not in node


_BEST_PRACTICE: list[tuple[str, Callable[[Mapping[str, Any]], bool], str]] = [
    (
        "unboundedString",
        _unbounded_string,
        "a string without maxLength (or enum, format): CEL rules over it are costed at the "
        "request size limit",
    ),
    ("unboundedList", _unbounded_list, "a list without maxItems"),
    ("unboundedMap", _unbounded_map, "a map without maxProperties"),
]


def _best_practice(
    new: Mapping[str, Any], old: Mapping[str, Any] | None, path: str, out: _Collector
) -> None:
    """Unbounded strings, lists and maps in ``new`` that ``old`` did not already have there.

    Ratcheting: a problem present at the same path in OLD is not reported again.
    """
    if not isinstance(new, Mapping):
        return
    old = old if isinstance(old, Mapping) else None
    for check, unbounded, message in _BEST_PRACTICE:
        if unbounded(new) and (old is None or not unbounded(old)):
            out.add(check, _field(path), message)
    old_props = (old or {}).get("properties") or {}
    for name, sub in (new.get("properties") or {}).items():
        if path == "" and name in ("apiVersion", "kind", "metadata"):
            continue
        _best_practice(
            sub,
            old_props.get(name) if isinstance(old_props, Mapping) else None,
            f"{path}.{name}",
            out,
        )
    if isinstance(new.get("items"), Mapping):
        _best_practice(new["items"], (old or {}).get("items"), f"{path}[*]", out)
    if isinstance(new.get("additionalProperties"), Mapping):
        _best_practice(
            new["additionalProperties"], (old or {}).get("additionalProperties"), f"{path}[*]", out
        )
