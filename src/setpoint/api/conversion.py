"""Versions of a kind and conversion between them, hub and spoke, in Python.

Each version of a kind stays its own :class:`~setpoint.api.resource.Resource` class. One
version is the *hub* (normally the storage version); every other version is a *spoke* that
derives from :class:`Convertible` and says, as two typed functions, how it converts to and
from the hub::

    @sp.resource(group=GROUP, version="v1", storage=True)
    class Tenant(sp.Resource):                 # the hub
        spec: TenantSpec

    @sp.resource(group=GROUP, version="v1alpha1", kind="Tenant")
    class TenantV1Alpha1(sp.Resource, sp.Convertible[Tenant]):
        spec: TenantSpecV1Alpha1

        def to_hub(self) -> Tenant:
            return Tenant(metadata=self.metadata, spec=...)

        @classmethod
        def from_hub(cls, hub: Tenant) -> Self:
            return cls(metadata=hub.metadata, spec=...)

A spoke converts to another spoke through the hub (spoke -> hub -> spoke), as in
controller-runtime's ``Hub``/``Convertible`` and the handbooks built on it. A version whose
schema equals the hub's needs no converter: it is converted by relabelling ``apiVersion``
(``setpoint generate crd`` refuses versions that differ without a converter).

**Lossless round trips, automatically.** A spoke usually cannot hold everything the hub can.
When an object goes down to a spoke, the hub's data (everything but ``apiVersion``, ``kind``
and ``metadata``) is kept in the spoke's :data:`CONVERSION_DATA_ANNOTATION`, the way
cluster-api does. When it comes back up, the paths the spoke loses are found by sending the
stored hub through the spoke and back and comparing; only those are restored from the
annotation, and only where the spoke still says what it said when the annotation was
written. Everything the spoke can hold comes from the spoke, so an edit made at the old
version wins. The annotation never appears on the hub.

**Metadata is the API server's.** A converter may change ``metadata.labels`` and
``metadata.annotations`` only: the API server rejects a changed name, namespace or uid and
silently restores every other metadata field. :func:`convert` checks this on every call and
raises :class:`ConversionError` naming the field, so a converter's unit test fails before the
server would.

This module is pure data (pydantic and orjson, no I/O). The conversion webhook
(:mod:`setpoint.webhook`), the fake client and ``setpoint generate crd`` all use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Self, TypeVar, cast

import orjson
from pydantic import ValidationError

from setpoint.api.declaration import DeclarationError
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.jsonvalues import copy_json
from setpoint.api.resource import ObjectMeta, Resource

__all__ = [
    "CONVERSION_DATA_ANNOTATION",
    "CONVERT_PATH",
    "ConversionError",
    "Convertible",
    "KindConversion",
    "convert",
    "hub_of",
    "is_convertible",
]

CONVERT_PATH: Final = "/convert"
"""The path the conversion webhook is served on (controller-runtime's too)."""

CONVERSION_DATA_ANNOTATION: Final = "setpoint.dev/conversion-data"
"""Annotation on an object read at a spoke version: the hub's data as JSON, so that what the
spoke cannot hold survives the way back up. Written by every down-conversion, removed by every
up-conversion; never on an object read at the hub version."""

_MISSING: Final = object()
"""A path that does not exist in an object."""

_TYPE_META: Final = frozenset({"apiVersion", "kind", "metadata"})
_EDITABLE_METADATA: Final = ("labels", "annotations")

H = TypeVar("H", bound=Resource)
R = TypeVar("R", bound=Resource)

Path = tuple[str | int, ...]


class ConversionError(SetpointError, ValueError):
    """An object could not be converted from one version of its kind to another.

    The message names the object, the version it came in, the version asked for and the
    reason. ``in_user_code`` is true when a converter (``to_hub``/``from_hub``) raised or
    returned something unusable; the webhook counts those separately, like a panic in Go.
    """

    __module__ = "setpoint"

    def __init__(
        self,
        message: str,
        *,
        object_ref: str = "",
        from_version: str = "",
        to_version: str = "",
        in_user_code: bool = False,
    ) -> None:
        super().__init__(message)
        self.object_ref = object_ref
        """``Kind namespace/name`` of the object (or what is known of it)."""
        self.from_version = from_version
        """The ``apiVersion`` the object came in."""
        self.to_version = to_version
        """The ``apiVersion`` it was being converted to."""
        self.in_user_code = in_user_code
        """The failure came from a converter function rather than from the input."""


class Convertible(Generic[H]):
    """Mix-in for a spoke version: typed conversion to and from the hub class ``H``.

    Derive a spoke from it next to :class:`~setpoint.api.resource.Resource`
    (``class TenantV1Alpha1(sp.Resource, sp.Convertible[Tenant])``) and define both
    :meth:`to_hub` and :meth:`from_hub`. They must copy ``metadata`` unchanged (labels and
    annotations excepted) and should not do I/O: the API server calls the webhook on every
    read and write at another version, with a deadline of a few seconds for a whole list.

    Raises (when the class is defined):
        DeclarationError: a converter function is missing, or ``H`` is not a Resource class.

    """

    __setpoint_hub__: ClassVar[type[Resource]]

    def to_hub(self) -> H:
        """Return this object at the hub version. Copy ``metadata``; map every field you can."""
        raise NotImplementedError

    @classmethod
    def from_hub(cls, hub: H) -> Self:
        """The hub object ``hub`` at this version. Copy ``metadata``; map what this version holds.

        What this version cannot hold need not be kept anywhere: the conversion machinery
        keeps the hub's data in :data:`CONVERSION_DATA_ANNOTATION` and restores it on the way
        back up.
        """
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hub = _declared_hub(cls)
        where = f"{cls.__module__}.{_short(cls)}"
        if hub is None:
            raise DeclarationError(
                f"{where} derives from sp.Convertible without naming the hub; write "
                "sp.Convertible[HubClass] with the hub version's class"
            )
        if not (isinstance(hub, type) and issubclass(hub, Resource)):
            raise DeclarationError(
                f"{where} names {hub!r} as its hub, which is not a Resource class; name the "
                "class of the hub version (normally the storage version)"
            )
        if issubclass(hub, Convertible):
            raise DeclarationError(
                f"{where} names {_short(hub)} as its hub, but that class is itself a "
                "spoke (sp.Convertible); a kind has one hub: convert to it directly"
            )
        missing = [
            name
            for name in ("to_hub", "from_hub")
            if all(
                name not in klass.__dict__
                for klass in cls.__mro__[: cls.__mro__.index(Convertible)]
            )
        ]
        if missing:
            raise DeclarationError(
                f"{where} derives from sp.Convertible[{_short(hub)}] but does not define "
                f"{' and '.join(missing)}; write `def to_hub(self) -> {_short(hub)}` and "
                f"`@classmethod def from_hub(cls, hub: {_short(hub)}) -> Self`"
            )
        cls.__setpoint_hub__ = hub


def _declared_hub(cls: type) -> Any:
    """The ``H`` of the nearest ``Convertible[H]`` base of ``cls``, else ``None``."""
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            if getattr(base, "__origin__", None) is Convertible:
                args: tuple[Any, ...] = getattr(base, "__args__", ())
                if len(args) == 1 and not isinstance(args[0], TypeVar):
                    return args[0]
    return None


def is_convertible(cls: type) -> bool:
    """Whether ``cls`` is a spoke: it derives from :class:`Convertible`."""
    return isinstance(cls, type) and issubclass(cls, Convertible)


def hub_of(cls: type[Resource]) -> type[Resource] | None:
    """The hub class a spoke converts through, or ``None`` when ``cls`` is not a spoke."""
    if is_convertible(cls):
        return cast("type[Convertible[Any]]", cls).__setpoint_hub__
    return None


# --------------------------------------------------------------------------- one kind


@dataclass(frozen=True, slots=True)
class _Version:
    """One served version: its class and how it reaches the hub."""

    cls: type[Resource]
    role: str
    """``"hub"``, ``"spoke"`` (has converters) or ``"alias"`` (same schema, relabelled)."""


class KindConversion:
    """Conversion between every version of one kind, through its hub.

    Build it from the version classes with :meth:`of`; :meth:`convert` then converts an
    object in its JSON form (what the API server sends in a ConversionReview) to any of the
    versions, and :meth:`convert_typed` does the same for typed objects.

    Expected flow:
        ``KindConversion.of(Tenant, TenantV1Alpha1)`` once (at startup); then
        ``convert(obj, "tenants.setpoint.dev/v1")`` per object. Up to the hub: the spoke's
        ``to_hub``, then restore what the spoke lost from :data:`CONVERSION_DATA_ANNOTATION`.
        Down from the hub: the spoke's ``from_hub``, then store the hub's data in that
        annotation. Spoke to spoke: up, then down.

    Guarantees:
        The input is never modified. The output's metadata is the input's, except labels
        and annotations (the converter's, plus or minus the conversion annotation), so it is
        exactly what the API server keeps. An object already at the asked version comes back
        unchanged (as a copy). hub -> spoke -> hub gives back the hub object (minus nothing).

    Caveats:
        Lists are compared by position when finding what a spoke loses: a spoke edit that
        reorders or removes list items may pair restored hub-only item fields with other
        items. Restoring needs the annotation, so an object written at a spoke version
        without it (a fresh ``kubectl apply`` of an old manifest) gets the hub's defaults for
        what the spoke cannot say. An annotation stored by another hub version is ignored.

    Errors:
        ConversionError: for every failure of one object, naming it, its version, the
            target version and the reason: an unknown version or kind, an object that
            does not match its version's schema, a converter that raised, returned the
            wrong type or changed metadata other than labels and annotations, or a
            malformed annotation.

    """

    def __init__(self, hub: type[Resource], versions: Mapping[str, _Version]) -> None:
        self.hub = hub
        """The hub class."""
        hub_gvk = hub.declaration().gvk
        self.group = hub_gvk.group
        """The API group of the kind."""
        self.kind = hub_gvk.kind
        """The kind."""
        self.hub_version = hub_gvk.version
        """The hub's version (``v1``)."""
        self._versions = dict(versions)
        self._prefix = f"{self.group}/"

    # -- building -------------------------------------------------------------------------

    @classmethod
    def of(cls, *classes: type[Resource]) -> KindConversion:
        """The conversion of one kind from its version classes.

        The hub is the class every spoke names (``sp.Convertible[Hub]``), added if not
        passed; without spokes, it is the storage version (or the only class). Classes that
        are neither hub nor spoke are converted by relabelling ``apiVersion``: pass them only
        when their schema equals the hub's (``setpoint generate crd`` checks that).

        Raises:
            DeclarationError: classes of different kinds, two classes for one version,
                spokes naming different hubs, or no way to tell the hub.

        """
        if not classes:
            raise DeclarationError("KindConversion.of() needs the version classes of a kind")
        declared = [_declaration(c) for c in classes]
        hubs = {hub_of(c) for c in classes} - {None}
        if len(hubs) > 1:
            names = ", ".join(sorted(h.__qualname__ for h in hubs if h is not None))
            raise DeclarationError(
                f"the spokes of {_kind_label(declared[0])} name different hubs ({names}); a "
                "kind has one hub: make every spoke sp.Convertible[TheSameHub]"
            )
        if hubs:
            hub = cast("type[Resource]", next(iter(hubs)))
        else:
            storage = [c for c, gvk in zip(classes, declared, strict=True) if _is_storage(c)]
            if len(classes) == 1:
                hub = classes[0]
            elif len(storage) == 1:
                hub = storage[0]
            else:
                raise DeclarationError(
                    f"cannot tell the hub of {_kind_label(declared[0])}: no class is a spoke "
                    "(sp.Convertible[Hub]) and not exactly one is the storage version"
                )
        hub_gvk = _declaration(hub)
        versions: dict[str, _Version] = {hub_gvk.version: _Version(hub, "hub")}
        for klass, gvk in zip(classes, declared, strict=True):
            if (gvk.group, gvk.kind) != (hub_gvk.group, hub_gvk.kind):
                raise DeclarationError(
                    f"{_short(klass)} declares {gvk.kind}.{gvk.group}, but the hub "
                    f"{_short(hub)} declares {_kind_label(hub_gvk)}; pass the versions of "
                    "one kind"
                )
            if klass is hub:
                continue
            if gvk.version in versions:
                other = versions[gvk.version].cls
                raise DeclarationError(
                    f"{_short(klass)} and {_short(other)} both declare version "
                    f"{gvk.version} of {_kind_label(gvk)}; give each class its own version"
                )
            role = "spoke" if hub_of(klass) is hub else "alias"
            versions[gvk.version] = _Version(klass, role)
        return cls(hub, versions)

    @property
    def versions(self) -> tuple[str, ...]:
        """Every version this conversion knows, hub first."""
        return tuple(self._versions)

    def class_of(self, version: str) -> type[Resource]:
        """The class of ``version``.

        Raises:
            KeyError: the version is not one of :attr:`versions`.

        """
        return self._versions[version].cls

    def has_converters(self) -> bool:
        """Whether any version is a spoke with converter functions."""
        return any(v.role == "spoke" for v in self._versions.values())

    # -- converting -----------------------------------------------------------------------

    def convert(self, obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
        """``obj`` (JSON form, any version of this kind) converted to ``api_version``.

        Raises:
            ConversionError: the object cannot be converted; the message says why.

        """
        source = obj.get("apiVersion")
        at = _Where(_object_ref(obj, self.kind), str(source), api_version)
        target = self._version_of(api_version, at, "the desired apiVersion")
        if not isinstance(source, str):
            raise at.error(f"apiVersion is {source!r}, not a string naming one of its versions")
        origin = self._version_of(source, at, "its apiVersion")
        kind = obj.get("kind")
        if kind != self.kind:
            raise at.error(f"kind is {kind!r}, expected {self.kind!r}")
        meta = obj.get("metadata", {})
        if not isinstance(meta, Mapping):
            raise at.error(f"metadata is {type(meta).__name__}, not an object")
        if origin is target:
            return copy_json(dict(obj))
        hub_obj = self._up(obj, origin, at) if origin.role != "hub" else obj
        if target.role == "hub":
            return copy_json(dict(obj)) if hub_obj is obj else dict(hub_obj)
        return self._down(hub_obj, target, at)

    def convert_typed(self, obj: Resource, to: type[R]) -> R:
        """The typed object ``obj`` as an instance of the version class ``to``.

        Raises:
            ConversionError: as :meth:`convert`; also when ``to`` is not a version of this kind.

        """
        target = _declaration(to)
        version = self._versions.get(target.version)
        if version is None or version.cls is not to:
            raise ConversionError(
                f"{_short(to)} is not a version of {self.kind}.{self.group} known to this "
                f"conversion (versions: {', '.join(self.versions)})",
                to_version=target.api_version,
            )
        return to.from_object(self.convert(obj.to_object(), target.api_version))

    # -- the two directions ---------------------------------------------------------------

    def _version_of(self, api_version: str, at: _Where, what: str) -> _Version:
        version = None
        if api_version.startswith(self._prefix):
            version = self._versions.get(api_version[len(self._prefix) :])
        if version is None:
            known = ", ".join(f"{self._prefix}{v}" for v in self._versions)
            raise at.error(
                f"{what} {api_version!r} is not a version of {self.kind}.{self.group} that "
                f"this conversion knows ({known})"
            )
        return version

    def _up(self, obj: Mapping[str, Any], origin: _Version, at: _Where) -> dict[str, Any]:
        """Spoke (or alias) JSON -> hub JSON, restoring what the spoke lost."""
        stored_raw, clean = _without_conversion_data(obj)
        clean_meta = cast("Mapping[str, Any]", clean.get("metadata") or {})
        hub_api = f"{self._prefix}{self.hub_version}"
        if origin.role == "alias":
            return {**copy_json(clean), "apiVersion": hub_api}
        spoke = self._parse(origin.cls, clean, at)
        _, hub_json = self._to_hub(spoke, clean_meta, at)
        if stored_raw is None:
            return hub_json
        stored = self._stored_hub_data(stored_raw, at)
        # What does the spoke lose? Send the stored hub through the spoke and back.
        stored_obj: dict[str, Any] = {"apiVersion": hub_api, "kind": self.kind}
        stored_obj["metadata"] = dict(clean_meta)
        stored_obj.update(stored)
        stored_hub = self._parse(self.hub, stored_obj, at, annotation=True)
        down, _ = self._from_hub(origin.cls, stored_hub, clean_meta, at)
        _, back = self._to_hub(down, clean_meta, at)
        round_trip = _data_of(back)
        for path in _differences(stored, round_trip):
            # Restore only where the spoke still says what it said when the annotation was
            # written: a field the user changed at the spoke version keeps the user's value.
            if _get(hub_json, path) == _get(round_trip, path):
                _put(hub_json, path, _get(stored, path))
        return hub_json

    def _down(self, hub_obj: Mapping[str, Any], target: _Version, at: _Where) -> dict[str, Any]:
        """Hub JSON -> spoke (or alias) JSON, keeping the hub's data in the annotation."""
        # A stray annotation on a hub object (copied by hand) is dropped, never nested.
        _, hub_obj = _without_conversion_data(hub_obj)
        meta = cast("Mapping[str, Any]", hub_obj.get("metadata") or {})
        if target.role == "alias":
            version = _declaration(target.cls).version
            return {**copy_json(hub_obj), "apiVersion": f"{self._prefix}{version}"}
        hub = self._parse(self.hub, hub_obj, at)
        _, out = self._from_hub(target.cls, hub, meta, at)
        data = _data_of(hub_obj)
        if data:
            out_meta = out["metadata"]
            annotations = dict(out_meta.get("annotations") or {})
            annotations[CONVERSION_DATA_ANNOTATION] = orjson.dumps(
                data, option=orjson.OPT_SORT_KEYS
            ).decode()
            out_meta["annotations"] = annotations
        return out

    # -- pieces ---------------------------------------------------------------------------

    @staticmethod
    def _parse(
        klass: type[Resource], obj: Mapping[str, Any], at: _Where, *, annotation: bool = False
    ) -> Resource:
        try:
            return klass.from_object(obj)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}"
                for error in exc.errors(include_url=False)[:5]
            )
            what = (
                f"the hub data in annotation {CONVERSION_DATA_ANNOTATION}"
                if annotation
                else f"the object read as {_short(klass)}"
            )
            raise at.error(f"{what} does not match its schema: {problems}") from exc

    def _to_hub(
        self, spoke: Resource, original_meta: Mapping[str, Any], at: _Where
    ) -> tuple[Resource, dict[str, Any]]:
        """Call the spoke's ``to_hub``; check its result; the hub, typed and as JSON."""
        name = f"{_short(type(spoke))}.to_hub()"
        before = _metadata_snapshot(spoke)
        try:
            result: object = cast("Convertible[Any]", spoke).to_hub()
        except Exception as exc:
            raise at.user_error(f"{name} raised {type(exc).__name__}: {exc}") from exc
        hub = _checked_type(result, self.hub, name, at)
        return hub, _finish(hub, original_meta, before, name, at)

    @staticmethod
    def _from_hub(
        spoke_cls: type[Resource], hub: Resource, original_meta: Mapping[str, Any], at: _Where
    ) -> tuple[Resource, dict[str, Any]]:
        """Call ``spoke_cls.from_hub``; check its result; the spoke, typed and as JSON."""
        name = f"{_short(spoke_cls)}.from_hub()"
        before = _metadata_snapshot(hub)
        try:
            result: object = cast("type[Convertible[Any]]", spoke_cls).from_hub(hub)
        except Exception as exc:
            raise at.user_error(f"{name} raised {type(exc).__name__}: {exc}") from exc
        spoke = _checked_type(result, spoke_cls, name, at)
        return spoke, _finish(spoke, original_meta, before, name, at)

    @staticmethod
    def _stored_hub_data(raw: Any, at: _Where) -> dict[str, Any]:
        fix = (
            f"it holds what {at.source} cannot, as setpoint wrote it: restore it, or remove it "
            "(the hub's defaults then apply to what this version cannot hold)"
        )
        try:
            data = orjson.loads(raw) if isinstance(raw, str) else None
        except orjson.JSONDecodeError as exc:
            raise at.error(
                f"annotation {CONVERSION_DATA_ANNOTATION} is not JSON ({exc}); {fix}"
            ) from exc
        if not isinstance(data, dict):
            raise at.error(f"annotation {CONVERSION_DATA_ANNOTATION} is not a JSON object; {fix}")
        return {k: v for k, v in data.items() if k not in _TYPE_META}


@dataclass(frozen=True, slots=True)
class _Where:
    """Which object is being converted from where to where, for error messages."""

    ref: str
    source: str
    desired: str

    def error(self, reason: str, *, in_user_code: bool = False) -> ConversionError:
        return ConversionError(
            f"{self.ref} ({self.source}) -> {self.desired}: {reason}",
            object_ref=self.ref,
            from_version=self.source,
            to_version=self.desired,
            in_user_code=in_user_code,
        )

    def user_error(self, reason: str) -> ConversionError:
        return self.error(reason, in_user_code=True)


def _checked_type(value: object, cls: type[R], name: str, at: _Where) -> R:
    if type(value) is not cls:
        raise at.user_error(f"{name} returned {_short(type(value))}, expected a {_short(cls)}")
    return value


def _finish(
    converted: Resource,
    original_meta: Mapping[str, Any],
    before: Mapping[str, Any],
    name: str,
    at: _Where,
) -> dict[str, Any]:
    """The converted object as JSON: original metadata, but the converter's labels/annotations.

    Checks first that the converter changed nothing else in metadata. ``before`` is the
    converter input's metadata, serialized before the call, so an in-place change is caught.
    """
    changed = _changed_metadata(before, _metadata_snapshot(converted))
    if changed is not None:
        field, old, new = changed
        raise at.user_error(
            f"{name} changed metadata.{field} ({old!r} -> {new!r}); a converter may change "
            "only metadata.labels and metadata.annotations (the API server rejects a new "
            "name, namespace or uid and silently restores other metadata): pass metadata "
            "through unchanged, e.g. `Hub(metadata=self.metadata, ...)`"
        )
    # Serializing metadata is a good part of the cost of a conversion, and it would only be
    # replaced by the original: leave it out.
    body: dict[str, Any] = converted.model_dump(mode="json", by_alias=True, exclude={"metadata"})
    meta = dict(original_meta)
    for key, value in (
        ("labels", converted.metadata.labels),
        ("annotations", converted.metadata.annotations),
    ):
        if value == original_meta.get(key, {}):
            continue  # unchanged: keep the original's form (an explicit {} stays)
        if value:
            meta[key] = dict(value)
        else:
            meta.pop(key, None)
    out = {"apiVersion": body.pop("apiVersion"), "kind": body.pop("kind"), "metadata": meta}
    out.update(body)
    return out


def _without_conversion_data(obj: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
    """The conversion-data annotation's value (``None`` if absent) and ``obj`` without it."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or CONVERSION_DATA_ANNOTATION not in annotations:
        return None, obj
    assert isinstance(meta, Mapping)
    kept = {k: v for k, v in annotations.items() if k != CONVERSION_DATA_ANNOTATION}
    new_meta = {k: v for k, v in meta.items() if k != "annotations"}
    if kept:
        new_meta["annotations"] = kept
    return annotations[CONVERSION_DATA_ANNOTATION], {**obj, "metadata": new_meta}


# --------------------------------------------------------------------------- helpers


def _short(cls: type) -> str:
    """A class name for messages, without ``<locals>`` noise."""
    return cls.__qualname__.rsplit("<locals>.", 1)[-1]


def _declaration(cls: type[Resource]) -> GroupVersionKind:
    if not (isinstance(cls, type) and issubclass(cls, Resource)):
        raise DeclarationError(f"{cls!r} is not a Resource class")
    return cls.declaration().gvk


def _is_storage(cls: type[Resource]) -> bool:
    return bool(cls.declaration().storage)


def _kind_label(gvk: GroupVersionKind) -> str:
    return f"{gvk.kind}.{gvk.group}"


def _object_ref(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    name = namespace = ""
    if isinstance(meta, Mapping):
        name = str(meta.get("name") or meta.get("generateName") or "")
        namespace = str(meta.get("namespace") or "")
    found_kind = obj.get("kind")
    kind = found_kind if isinstance(found_kind, str) and found_kind else kind
    return f"{kind} {namespace + '/' if namespace else ''}{name or '(unnamed)'}"


def _data_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything but apiVersion, kind and metadata: what a version's schema describes."""
    return {k: v for k, v in obj.items() if k not in _TYPE_META}


def _metadata_snapshot(obj: Resource) -> dict[str, Any]:
    """``obj.metadata`` except labels and annotations, copied one level deep.

    Cheap enough for every conversion (no serialization); the copy makes an in-place
    change of a list or map (``finalizers.append``) visible to :func:`_changed_metadata`.
    """
    meta = obj.metadata
    snapshot: dict[str, Any] = {}
    for source in (meta.__dict__, meta.__pydantic_extra__ or {}):
        for key, value in source.items():
            if key in _EDITABLE_METADATA:
                continue
            if isinstance(value, list):
                snapshot[key] = list(value)
            elif isinstance(value, dict):
                snapshot[key] = dict(value)
            else:
                snapshot[key] = value
    return snapshot


def _changed_metadata(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[str, Any, Any] | None:
    """The first metadata field (by JSON name) that differs between two snapshots, if any."""
    for key in before.keys() | after.keys():
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old != new:
            info = ObjectMeta.model_fields.get(key)
            name = info.alias if info is not None and info.alias else key
            return name, None if old is _MISSING else old, None if new is _MISSING else new
    return None


def _differences(a: Any, b: Any, path: Path = ()) -> list[Path]:
    """The topmost paths where the JSON values ``a`` and ``b`` differ.

    Objects are compared key by key, lists of equal length item by item; anything else
    (including lists of different lengths) is one value.
    """
    if a is b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[Path] = []
        for key in a.keys() | b.keys():
            if key not in a or key not in b:
                out.append((*path, key))
            else:
                out.extend(_differences(a[key], b[key], (*path, key)))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            out.extend(_differences(x, y, (*path, index)))
        return out
    return [] if a == b and type(a) is type(b) else [path]


def _get(obj: Any, path: Path) -> Any:
    """The value at ``path`` in a JSON value, or ``_MISSING``."""
    for step in path:
        found = (isinstance(step, str) and isinstance(obj, dict) and step in obj) or (
            isinstance(step, int) and isinstance(obj, list) and 0 <= step < len(obj)
        )
        if not found:
            return _MISSING
        obj = obj[step]
    return obj


def _put(obj: Any, path: Path, value: Any) -> None:
    """Set (or, for ``_MISSING``, remove) the value at ``path`` if its parent exists."""
    parent = _get(obj, path[:-1])
    step = path[-1]
    if isinstance(step, str) and isinstance(parent, dict):
        if value is _MISSING:
            parent.pop(step, None)
        else:
            parent[step] = value
    elif (
        isinstance(step, int)
        and isinstance(parent, list)
        and 0 <= step < len(parent)
        and value is not _MISSING
    ):
        parent[step] = value


# --------------------------------------------------------------------------- typed use

_CONVERSIONS: dict[tuple[type[Resource], ...], KindConversion] = {}


def convert(obj: Resource, to: type[R]) -> R:
    """The typed object ``obj`` converted to the version class ``to``, through the hub.

    What the API server's conversion webhook would return, as a typed object: a spoke's
    converters are called, their metadata changes checked, and what a spoke cannot hold
    kept in (and restored from) :data:`CONVERSION_DATA_ANNOTATION`. Use it in converter unit
    tests: ``convert(convert(hub, TenantV1Alpha1), Tenant) == hub``.

    Raises:
        ConversionError: the conversion failed; the message names the object, both
            versions and the reason (a converter changing metadata.name, for example).
        DeclarationError: ``obj`` and ``to`` are not versions of one kind with a hub.

    """
    classes = tuple(dict.fromkeys(c for c in (type(obj), to, hub_of(type(obj)), hub_of(to)) if c))
    conversion = _CONVERSIONS.get(classes)
    if conversion is None:
        conversion = _CONVERSIONS[classes] = KindConversion.of(*classes)
    return conversion.convert_typed(obj, to)
