"""Which existing objects a new CRD schema would reject (``setpoint crd diff --against-cluster``).

A schema diff says what *might* break; this says what *does*. For every
version the new CRD serves that the cluster serves today, every existing
object is read at that version and sent to the API server in a server-side
dry-run write validated by the *new* schema. The server runs everything it
would run on a real write: types, bounds, patterns, enums, required fields,
CEL rules (their cost limits included), defaulting and pruning.

A version the new CRD adds is checked too, after converting: every live
object is read at the live storage version and converted to the new version
the way the new CRD says objects will reach it. With conversion strategy
``None`` that is what the API server does, relabelling ``apiVersion``; with
``Webhook`` it is the ``converter`` the caller passes (``setpoint crd diff``
passes the :class:`~setpoint.api.conversion.KindConversion` of the Python
types when NEW is given as Python). So a converter's output is validated
against the schema it must satisfy.

Expected Flow:
    1. Read the live CRD (it must exist: no live objects, nothing to check).
    2. For each version the new CRD serves, create a temporary *shadow* CRD
       in a group of its own (``<version>.<plural>.dryrun-<token>.setpoint.dev``)
       holding only that version with the new schema: storage, no conversion,
       no status subresource (so ``status`` is validated with the rest), and
       wait until it is served.
    3. List the live objects page by page: at that version when the cluster
       serves it, else at the live storage version, converting each one (a
       conversion that fails is a rejection, with the converter's message).
       Dry-run create each as the shadow kind; a 422 is a rejection,
       recorded with the server's causes.
    4. Delete the shadow CRD, whatever happened.

Guarantees:
    - Nothing is written to the live CRD or its objects; the shadow CRD is
      deleted on every path out (success, rejection, error, cancellation).
    - Each rejection names the object, the version and the server's reasons.

Caveats:
    - The live CRD is never updated, so this is a *create*-style check: the
      server's validation ratcheting (an update that leaves an invalid field
      unchanged passes) and CEL transition rules (``oldSelf``) do not apply.
      A listed object is one that cannot be written as it is under the new
      schema; an unchanged no-op update of it may still pass thanks to
      ratcheting, but any change to the offending fields will not.
    - A version the new CRD adds and converts by webhook is not checked
      without a ``converter`` (it is listed in ``skipped_versions``). Objects
      are converted from the live storage version; one stored at an older
      version reaches a ``None`` conversion from that version instead.
    - It needs the right to create and delete CRDs and to list the kind.

Errors:
    - :class:`DryRunError` when the live CRD does not exist.
    - :class:`~setpoint.migrate.install.CRDNotReady` when a shadow CRD does not
      become ready; client errors other than 422 propagate.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from setpoint.api import kinds
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.client.errors import Invalid, NotFound
from setpoint.migrate.install import apply_crd

__all__ = ["Converter", "DryRunError", "DryRunReport", "Rejection", "objects_rejected_by"]

Converter = Callable[[Mapping[str, Any], str], dict[str, Any]]
"""Converts one object (JSON form, any version of its kind) to an ``apiVersion``, as
:meth:`setpoint.api.conversion.KindConversion.convert` does; raises when it cannot."""

_SHADOW_DOMAIN = "setpoint.dev"


class DryRunError(SetpointError, RuntimeError):
    """The check cannot run; the message says why and what to do."""


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """One existing object the new schema rejects."""

    version: str
    """The version it was read and validated at."""
    namespace: str | None
    """Its namespace (``None`` when cluster-scoped)."""
    name: str
    """Its name."""
    reasons: tuple[str, ...]
    """The server's causes, ``field: message`` each."""

    def __str__(self) -> str:
        key = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{key} ({self.version}): {'; '.join(self.reasons)}"


@dataclass(frozen=True, kw_only=True)
class DryRunReport:
    """What :func:`objects_rejected_by` checked and found."""

    checked: int
    """Objects sent through the new schema (counted once per version)."""
    rejections: tuple[Rejection, ...]
    """The objects the new schema rejects."""
    skipped_versions: tuple[str, ...]
    """Versions the new CRD adds that could not be checked: converted by a webhook and
    no ``converter`` given."""
    converted_versions: tuple[str, ...] = ()
    """Versions the new CRD adds, checked after converting the live objects to them."""
    converted_from: str | None = None
    """The live version those objects were read at (the live storage version)."""


async def objects_rejected_by(
    client: Client,
    new_crd: Mapping[str, Any],
    *,
    page_size: int = 500,
    converter: Converter | None = None,
) -> DryRunReport:
    """Dry-run every live object of ``new_crd``'s kind against its new schema (module docstring).

    ``converter`` converts objects to a version the new CRD adds when the new CRD converts
    by webhook (``KindConversion.convert`` of the kind's Python types); with strategy
    ``None`` the server's relabelling is used and ``converter`` is not needed.
    """
    name = str(new_crd["metadata"]["name"])
    try:
        live = await client.get(kinds.CustomResourceDefinition, name)
    except NotFound:
        raise DryRunError(
            f"CRD {name} is not installed in the cluster: there are no objects to check"
        ) from None
    live_versions = live["spec"]["versions"]
    live_served = {v["name"] for v in live_versions if v.get("served", True)}
    source = next(
        (v["name"] for v in live_versions if v.get("storage") and v["name"] in live_served),
        next((v["name"] for v in live_versions if v["name"] in live_served), None),
    )
    spec = new_crd["spec"]
    kind = spec["names"]["kind"]
    strategy = (spec.get("conversion") or {}).get("strategy") or "None"
    checked = 0
    rejections: list[Rejection] = []
    skipped: list[str] = []
    converted: list[str] = []
    for version in spec["versions"]:
        vname = version["name"]
        if not version.get("served", True):
            continue
        convert: Converter | None = None
        read_at = vname
        if vname not in live_served:
            if source is None or (strategy != "None" and converter is None):
                skipped.append(vname)
                continue
            convert = converter if strategy != "None" else _relabel
            read_at = source
            converted.append(vname)
        shadow = _shadow_crd(new_crd, version)
        shadow_gvk = GroupVersionKind(shadow["spec"]["group"], vname, kind)
        target = GroupVersionKind(spec["group"], vname, kind).api_version
        try:
            await apply_crd(client, shadow)
            live_gvk = GroupVersionKind(spec["group"], read_at, kind)
            token: str | None = None
            while True:
                page = await client.list_page(live_gvk, limit=page_size, continue_token=token)
                for item in page.items:
                    checked += 1
                    obj: Mapping[str, Any] = item
                    rejection = None
                    if convert is not None:
                        obj, rejection = _converted(item, convert, target, vname, spec["scope"])
                    if rejection is None:
                        rejection = await _check(client, obj, shadow_gvk, vname, spec["scope"])
                    if rejection is not None:
                        rejections.append(rejection)
                token = page.continue_token
                if not token:
                    break
        finally:
            with contextlib.suppress(NotFound):
                await client.delete(kinds.CustomResourceDefinition, shadow["metadata"]["name"])
    return DryRunReport(
        checked=checked,
        rejections=tuple(rejections),
        skipped_versions=tuple(skipped),
        converted_versions=tuple(converted),
        converted_from=source if converted else None,
    )


def _relabel(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """What the API server does with conversion strategy ``None``: only apiVersion changes."""
    return {**copy.deepcopy(dict(obj)), "apiVersion": api_version}


def _converted(
    obj: Mapping[str, Any], convert: Converter, api_version: str, version: str, scope: str
) -> tuple[Mapping[str, Any], Rejection | None]:
    """``obj`` converted to ``api_version``, or a rejection naming why it could not be."""
    try:
        return convert(obj, api_version), None
    except Exception as exc:  # a converter's failure is the finding itself
        meta = obj.get("metadata") or {}
        return obj, Rejection(
            version=version,
            namespace=meta.get("namespace") if scope == "Namespaced" else None,
            name=str(meta.get("name")),
            reasons=(f"conversion to {api_version} failed: {type(exc).__name__}: {exc}",),
        )


def _shadow_crd(crd: Mapping[str, Any], version: Mapping[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]
    plural = spec["names"]["plural"]
    group = f"{version['name']}.{plural}.dryrun-{secrets.token_hex(4)}.{_SHADOW_DOMAIN}"
    names = {k: v for k, v in spec["names"].items() if k in ("kind", "plural", "listKind")}
    shadow_version = {
        k: copy.deepcopy(v)
        for k, v in version.items()
        if k in ("name", "schema", "additionalPrinterColumns", "selectableFields")
    }
    shadow_version.update(served=True, storage=True)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {"setpoint.dev/dry-run-of": str(crd["metadata"]["name"])[:63].strip(".-")},
        },
        "spec": {
            "group": group,
            "names": names,
            "scope": spec.get("scope", "Namespaced"),
            "versions": [shadow_version],
        },
    }


async def _check(
    client: Client, obj: Mapping[str, Any], shadow: GroupVersionKind, version: str, scope: str
) -> Rejection | None:
    meta = obj.get("metadata") or {}
    body: dict[str, Any] = {
        k: copy.deepcopy(v) for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")
    }
    namespace = meta.get("namespace") if scope == "Namespaced" else None
    body["apiVersion"] = shadow.api_version
    body["kind"] = shadow.kind
    body["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta} | (
        {"namespace": namespace or "default"} if scope == "Namespaced" else {}
    )
    try:
        await client.create(body, dry_run=True)
    except Invalid as exc:
        reasons = tuple(f"{c.field}: {c.message}" if c.field else c.message for c in exc.causes)
        return Rejection(
            version=version,
            namespace=namespace,
            name=str(meta.get("name")),
            reasons=reasons or (str(exc),),
        )
    return None
