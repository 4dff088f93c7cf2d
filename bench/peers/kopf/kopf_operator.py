"""The kopf peer of the converge benchmark: each Widget gets a child ConfigMap and Ready.

The same operator as ``bench/converge/widget_operator.py``, written the way kopf's documentation
writes one: an ``on.create`` + ``on.resume`` handler creates the child (``kopf.adopt`` sets
the controller owner reference) and sets the status condition through ``patch``, which kopf
sends to the status subresource. kopf has no API client for user code, so the child is
created with a plain aiohttp POST (kopf itself talks to the API server with aiohttp).

Settings that differ from kopf's defaults, and why:

- At most ``--workers`` handlers run at once (a semaphore around the handler body): the
  same concurrency as setpoint's ``max_concurrent_reconciles`` and controller-runtime's
  ``MaxConcurrentReconciles``. Not ``queueing.worker_limit``: a kopf worker serves one
  object and keeps its slot for ``queueing.idle_timeout`` (5 s) after that object's last
  event, so ``worker_limit=8`` converges 8 objects per 5 s (50 Widgets took 37.7 s, against
  3.9 s for the floor), which measures the idle timeout, not kopf.
- ``posting.enabled = False``: by default kopf posts a Kubernetes Event per handler
  outcome ("Handler ... succeeded", "Creation is processed"); the other implementations
  post none, and the benchmark compares the same writes.
- ``standalone``, cluster-wide: no peering objects (the plane has no KopfPeering CRD).

kopf's own bookkeeping stays at its defaults (the ``last-handled-configuration`` annotation),
because that is part of what kopf costs.

Run by ``bench/converge/run.py`` (``KUBECONFIG`` points at the plane)::

    .venv/bin/python bench/peers/kopf/kopf_operator.py --workers 8
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: process start as the operator sees it

import argparse  # noqa: E402
import asyncio  # noqa: E402
import base64  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import ssl  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
import kopf  # noqa: E402
import yaml  # noqa: E402


class Concurrency:
    """How many handlers may run at once (set from ``--workers`` before kopf starts)."""

    workers = 8
    limit: asyncio.Semaphore | None = None


class Api:
    """A minimal aiohttp client for the one call kopf has no helper for: creating a child."""

    def __init__(self) -> None:
        path = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        config = yaml.safe_load(Path(path).read_text())
        context = next(
            c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
        )
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.server = cluster["server"]
        ctx = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            ctx.load_cert_chain(cert, key)
        self._ssl = ctx
        self._session: aiohttp.ClientSession | None = None

    async def create_config_map(self, body: dict[str, Any]) -> int:
        """POST a ConfigMap; return the HTTP status (409 AlreadyExists is fine for us)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=100),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        namespace = body["metadata"]["namespace"]
        url = f"{self.server}/api/v1/namespaces/{namespace}/configmaps"
        async with self._session.post(url, json=body) as response:
            if response.status not in (201, 409):
                raise kopf.TemporaryError(
                    f"creating ConfigMap {namespace}/{body['metadata']['name']} failed: "
                    f"{response.status} {await response.text()}",
                    delay=1,
                )
            return response.status

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()


API = Api()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    Concurrency.limit = asyncio.Semaphore(Concurrency.workers)
    settings.posting.enabled = False


@kopf.on.cleanup()
async def close_api(**_: Any) -> None:
    await API.close()


@kopf.on.resume("bench.setpoint.dev", "v1", "widgets")
@kopf.on.create("bench.setpoint.dev", "v1", "widgets")
async def make_child(
    body: kopf.Body, spec: kopf.Spec, meta: kopf.Meta, patch: kopf.Patch, **_: Any
) -> None:
    assert Concurrency.limit is not None  # set by the startup handler
    async with Concurrency.limit:
        await reconcile(body, spec, meta, patch)


async def reconcile(body: kopf.Body, spec: kopf.Spec, meta: kopf.Meta, patch: kopf.Patch) -> None:
    """Create the child (409 is fine), then set Ready through kopf's status patch."""
    child: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": meta["name"]},
        "data": {"size": str(spec.get("size", 0))},
    }
    kopf.adopt(child, owner=body)
    await API.create_config_map(child)
    generation = meta["generation"]
    conditions = list(body.get("status", {}).get("conditions", []))
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [c for c in conditions if c.get("type") != "Ready"]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "ChildCreated",
                "message": "the child ConfigMap exists",
                "observedGeneration": generation,
                "lastTransitionTime": now,
            }
        )
        patch.status["conditions"] = conditions
        patch.status["observedGeneration"] = generation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8, help="handlers running at once")
    args = parser.parse_args()
    Concurrency.workers = args.workers
    print(f"started {STARTED:.6f}", flush=True)
    kopf.configure(verbose=False)
    asyncio.run(kopf.operator(standalone=True, clusterwide=True))


if __name__ == "__main__":
    main()
