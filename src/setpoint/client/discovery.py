"""Discovery and the RESTMapper: which kinds the server serves, and where.

The mapper answers "kind → resource, scope, subresources" and "which version
of this group/kind does the server prefer". It reads the server's aggregated
discovery documents (``apidiscovery.k8s.io/v2``: the whole API surface in two
requests) and falls back to the legacy per-group documents for servers that
lack them.

The mapping is cached. A miss triggers one refresh before it is reported, so a
CRD installed a moment ago is found without restarting anything; concurrent
misses share that refresh, and refreshes are spaced by ``min_refresh_interval``
so a typo cannot hammer the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.client.errors import NotFound, UnknownKind
from setpoint.client.transport import Transport

__all__ = ["RESTMapper"]

_AGGREGATED = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


class RESTMapper:
    """Maps kinds to REST resources using the server's discovery information."""

    def __init__(self, transport: Transport, *, min_refresh_interval: float = 1.0) -> None:
        self._transport = transport
        self._min_refresh_interval = min_refresh_interval
        self._by_gvk: dict[GroupVersionKind, ResourceInfo] = {}
        # (group, kind) -> versions in the server's preference order
        self._versions: dict[tuple[str, str], list[str]] = {}
        # lower-case plural, singular and short names -> infos, for the CLI
        self._by_name: dict[str, list[ResourceInfo]] = {}
        self._loaded_at: float | None = None
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Re-read discovery from the server, replacing the cached mapping."""
        async with self._lock:
            await self._load()

    async def _load(self) -> None:
        infos: list[tuple[ResourceInfo, int]] = []
        # Both at once: one round trip less on every operator's start-up path. The first
        # error in the order /api, /apis is raised, as when they were asked one by one.
        answers = await asyncio.gather(
            self._transport.request("GET", "/api", accept=_AGGREGATED),
            self._transport.request("GET", "/apis", accept=_AGGREGATED),
            return_exceptions=True,
        )
        docs = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            docs.append(answer.body)
        for doc in docs:
            if isinstance(doc, Mapping) and doc.get("kind") == "APIGroupDiscoveryList":
                infos.extend(_from_aggregated(doc))
            else:
                infos.extend(await self._legacy(doc))
        by_gvk: dict[GroupVersionKind, ResourceInfo] = {}
        versions: dict[tuple[str, str], list[tuple[int, str]]] = {}
        by_name: dict[str, list[ResourceInfo]] = {}
        for info, rank in infos:
            by_gvk[info.gvk] = info
            versions.setdefault((info.gvk.group, info.gvk.kind), []).append(
                (rank, info.gvk.version)
            )
            for name in {info.plural, info.singular, *info.short_names, info.gvk.kind.lower()}:
                if name:
                    by_name.setdefault(name.lower(), []).append(info)
        self._by_gvk = by_gvk
        self._versions = {k: [v for _, v in sorted(vs)] for k, vs in versions.items()}
        self._by_name = by_name
        self._loaded_at = time.monotonic()

    async def _legacy(self, doc: Any) -> list[tuple[ResourceInfo, int]]:
        """Per-group discovery, for servers without aggregated discovery."""
        out: list[tuple[ResourceInfo, int]] = []
        if not isinstance(doc, Mapping):
            return out
        if doc.get("kind") == "APIVersions":  # /api
            targets = [("", v, f"/api/{v}", i) for i, v in enumerate(doc.get("versions") or [])]
        else:  # /apis: APIGroupList
            targets = []
            for group in doc.get("groups") or []:
                preferred = (group.get("preferredVersion") or {}).get("version")
                listed: list[str] = [gv.get("version", "") for gv in group.get("versions") or []]
                ordered = sorted(listed, key=lambda v: v != preferred)
                for rank, version in enumerate(ordered):
                    targets.append(
                        (group["name"], version, f"/apis/{group['name']}/{version}", rank)
                    )
        for group_name, version, path, rank in targets:
            try:
                resp = await self._transport.request("GET", path)
            except NotFound:
                continue  # a group version removed between the two requests
            subresources: dict[str, set[str]] = {}
            resources = resp.body.get("resources") or [] if isinstance(resp.body, dict) else []
            for res in resources:
                base, _, sub = res.get("name", "").partition("/")
                if sub:
                    subresources.setdefault(base, set()).add(sub)
            for res in resources:
                name = res.get("name", "")
                if "/" in name:
                    continue
                out.append(
                    (
                        ResourceInfo(
                            gvk=GroupVersionKind(group_name, version, res.get("kind", "")),
                            plural=name,
                            namespaced=bool(res.get("namespaced")),
                            subresources=frozenset(subresources.get(name, ())),
                            singular=res.get("singularName", "") or "",
                            short_names=tuple(res.get("shortNames") or ()),
                        ),
                        rank,
                    )
                )
        return out

    async def _refresh_for_miss(self) -> None:
        async with self._lock:
            loaded = self._loaded_at
            if loaded is not None and time.monotonic() - loaded < self._min_refresh_interval:
                return
            await self._load()

    async def mapping(self, gvk: GroupVersionKind) -> ResourceInfo:
        """The resource that serves ``gvk``.

        Raises:
            UnknownKind: the server does not serve this group/version/kind, even
                after a refresh; the message lists the versions it does serve.

        """
        info = self._by_gvk.get(gvk)
        if info is None:
            await self._refresh_for_miss()
            info = self._by_gvk.get(gvk)
        if info is None:
            raise UnknownKind(self._unknown_message(gvk))
        return info

    async def preferred_version(self, group: str, kind: str) -> str:
        """The version the server prefers for ``group``/``kind`` (first in discovery order)."""
        versions = self._versions.get((group, kind))
        if not versions:
            await self._refresh_for_miss()
            versions = self._versions.get((group, kind))
        if not versions:
            raise UnknownKind(self._unknown_message(GroupVersionKind(group, "", kind)))
        return versions[0]

    async def lookup(self, name: str) -> list[ResourceInfo]:
        """Resources matching a plural, singular, short or kind name.

        For example ``deploy``, ``configmaps`` or ``Tenant``, optionally
        qualified as ``name.group``.
        """
        if self._loaded_at is None:
            await self.refresh()
        base, _, group = name.lower().partition(".")
        matches = self._by_name.get(base, [])
        if group:
            matches = [m for m in matches if m.gvk.group == group]
        if not matches:
            await self._refresh_for_miss()
            matches = [m for m in self._by_name.get(base, []) if not group or m.gvk.group == group]
        return matches

    def known(self) -> Iterable[ResourceInfo]:
        """Every resource in the cached mapping (empty before the first lookup)."""
        return self._by_gvk.values()

    def _unknown_message(self, gvk: GroupVersionKind) -> str:
        versions = self._versions.get((gvk.group, gvk.kind))
        what = f"kind {gvk.kind!r} in group {gvk.group or 'core'!r}"
        if versions:
            return (
                f"the server does not serve version {gvk.version!r} of {what}; it serves "
                f"{', '.join(versions)}. Use one of those versions"
            )
        hint = (
            " Is its CustomResourceDefinition installed (kubectl get crds)?"
            if gvk.group and "." in gvk.group and not gvk.group.endswith(".k8s.io")
            else ""
        )
        return f"the server at {self._transport.server} does not serve {what}.{hint}"


def _from_aggregated(doc: Mapping[str, Any]) -> list[tuple[ResourceInfo, int]]:
    out: list[tuple[ResourceInfo, int]] = []
    for group in doc.get("items") or []:
        group_name = (group.get("metadata") or {}).get("name", "") or ""
        for rank, version in enumerate(group.get("versions") or []):
            version_name = version.get("version", "")
            for res in version.get("resources") or []:
                kind = (res.get("responseKind") or {}).get("kind", "")
                if not kind:
                    continue
                out.append(
                    (
                        ResourceInfo(
                            gvk=GroupVersionKind(group_name, version_name, kind),
                            plural=res.get("resource", ""),
                            namespaced=res.get("scope") == "Namespaced",
                            subresources=frozenset(
                                s.get("subresource", "") for s in res.get("subresources") or []
                            ),
                            singular=res.get("singularResource", "") or "",
                            short_names=tuple(res.get("shortNames") or ()),
                        ),
                        rank,
                    )
                )
    return out
