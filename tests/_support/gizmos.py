"""Gizmo manifests, and a reference reconciler the controller integration tests run.

The kind itself is declared in tests/_support/kinds.py. A Gizmo has ``spec.size``; its
controller keeps one child ConfigMap (controlled by the Gizmo through an owner reference)
with ``data.size``, and writes ``status`` through the status subresource. Reads go through
``ctx.reader``, writes through ``ctx.client``, and the status write is optimistic (a PUT
with the read resourceVersion), so a stale read would surface as a 409 Conflict.
"""

from __future__ import annotations

import asyncio
from typing import Any

from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.client import Client, NotFound
from setpoint.controller import Context, Request, Result
from tests._support.kinds import GIZMO


def gizmo(name: str, namespace: str, **spec: Any) -> JsonObject:
    """A Gizmo manifest with ``spec`` as given (``size=3``)."""
    return {
        "apiVersion": GIZMO.api_version,
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


async def create_gizmos(client: Client, namespace: str, count: int, size: int = 1) -> None:
    limit = asyncio.Semaphore(20)

    async def one(i: int) -> None:
        async with limit:
            await client.create(gizmo(f"g-{i:04d}", namespace, size=size))

    await asyncio.gather(*(one(i) for i in range(count)))


def child_name(name: str) -> str:
    return f"{name}-config"


def desired_status(obj: JsonObject) -> dict[str, Any]:
    return {
        "size": obj["spec"]["size"],
        "observedGeneration": obj["metadata"]["generation"],
        "configMap": child_name(obj["metadata"]["name"]),
    }


async def reconcile_gizmo(ctx: Context, request: Request) -> Result | None:
    """Keep the child ConfigMap and the status in line with ``spec.size``."""
    try:
        obj = await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
    except NotFound:
        return None  # deleted; the child is garbage-collected
    data = {"size": str(obj["spec"]["size"])}
    name = child_name(request.name)
    try:
        child = await ctx.reader.get(kinds.ConfigMap, name, namespace=request.namespace)
    except NotFound:
        await ctx.client.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": request.namespace,
                    "ownerReferences": [
                        {
                            "apiVersion": GIZMO.api_version,
                            "kind": "Gizmo",
                            "name": request.name,
                            "uid": obj["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "data": data,
            }
        )
    else:
        if child.get("data") != data:
            child["data"] = data
            await ctx.client.update(child)
    status = desired_status(obj)
    if obj.get("status") != status:
        obj["status"] = status
        await ctx.client.replace_status(obj)
    return None


async def converged(client: Client, namespace: str, expected: int) -> bool:
    """Every Gizmo has the status and the child ConfigMap its spec asks for."""
    gizmos = await client.list(GIZMO, namespace=namespace)
    if len(gizmos) != expected:
        return False
    children = {
        o["metadata"]["name"]: o for o in await client.list(kinds.ConfigMap, namespace=namespace)
    }
    for obj in gizmos:
        if obj.get("status") != desired_status(obj):
            return False
        child = children.get(child_name(obj["metadata"]["name"]))
        if child is None or child.get("data") != {"size": str(obj["spec"]["size"])}:
            return False
        refs = child["metadata"].get("ownerReferences") or []
        if not any(r.get("controller") and r.get("uid") == obj["metadata"]["uid"] for r in refs):
            return False
    return True
