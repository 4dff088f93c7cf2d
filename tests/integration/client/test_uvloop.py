"""setpoint's client and cache on uvloop's event loop, against the real API server.

uvloop's transports implement ``asyncio.Transport`` without subclassing it, and its TLS is its
own. Until the client stopped asserting ``isinstance(transport, asyncio.Transport)``, the
first connection of a process running on uvloop failed with an AssertionError. The script runs
in its own process so that its loop is uvloop's from the start, as an operator's would be.
"""

import asyncio
import os
import sys
from pathlib import Path

from setpoint.api import kinds
from setpoint.client import Client

SCRIPT = r"""
import asyncio
import sys

import uvloop

from setpoint import Cache, Client, kinds


async def main(namespace: str) -> None:
    async with Client.from_environment() as client:
        listed = await client.list_page(kinds.ConfigMap, namespace=namespace, limit=1)
        async with client.watch(
            kinds.ConfigMap,
            namespace=namespace,
            resource_version=listed.resource_version,
            timeout_seconds=30,
        ) as watch:
            await client.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "created", "namespace": namespace},
                    "data": {"how": "post"},
                }
            )
            await client.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "applied", "namespace": namespace},
                    "data": {"how": "apply"},
                },
                field_manager="uvloop-test",
                force=True,
            )
            seen = set()
            async for event in watch:
                if event.type == "ADDED":
                    seen.add(event.object["metadata"]["name"])
                if seen >= {"created", "applied"}:
                    break
        cache = Cache(client)
        await cache.start()
        try:
            informer = cache.informer(kinds.ConfigMap)
            await informer.wait_for_sync(30)
            cached = await cache.get(kinds.ConfigMap, "applied", namespace=namespace)
        finally:
            await cache.stop(5)
        loop = type(asyncio.get_running_loop())
        print(loop.__module__, ",".join(sorted(seen)), cached["data"]["how"])


uvloop.run(main(sys.argv[1]))
"""


async def test_client_watch_and_cache_run_on_uvloop(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """On uvloop, a process creates, applies, watches and syncs a cache over TLS.

    The child prints its loop's module, the names its watch saw added and what its cache
    read; the test reads both objects back through its own client.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        namespace,
        env={**os.environ, "KUBECONFIG": str(kubeconfig_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=90)
    assert process.returncode == 0, err.decode(errors="replace")[-3000:]
    assert out.decode().split() == ["uvloop", "applied,created", "apply"]
    created = await k8s.get(kinds.ConfigMap, "created", namespace=namespace)
    applied = await k8s.get(kinds.ConfigMap, "applied", namespace=namespace)
    assert created["data"] == {"how": "post"}
    assert applied["data"] == {"how": "apply"}
