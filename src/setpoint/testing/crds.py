"""Install an operator's CRDs, generated from its Python types, for an integration test.

::

    @pytest_asyncio.fixture(scope="session", loop_scope="session")
    async def greeting_crd(k8s: sp.Client) -> None:
        await install_crds(k8s, Greeting)

The CRD is generated exactly as ``setpoint generate crd`` writes it, so the test runs
against the schema (defaults, validation, pruning) the users of the operator get.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from setpoint.api.resource import Resource
from setpoint.client.client import Client
from setpoint.crd.generator import crd_for
from setpoint.migrate.install import apply_crd

__all__ = ["install_crds"]


async def install_crds(
    client: Client, *kinds: type[Resource] | Mapping[str, Any], timeout: float = 60.0
) -> list[dict[str, Any]]:
    """Create (or replace) the CRD of each kind and wait until each is served.

    Each argument is a typed resource class (its CRD is generated with ``crd_for``; pass
    several versions of one kind as one already-generated manifest) or a CRD manifest.
    Installing again is harmless: an unchanged CRD is replaced by itself.

    Returns:
        The CRDs as the server holds them, Established and discoverable.

    Raises:
        CRDNotReady: a CRD was not served within ``timeout`` seconds.
        CRDGenerationError: a type does not make a valid CRD (the message names the field).

    """
    installed = []
    for kind in kinds:
        manifest = crd_for(kind) if isinstance(kind, type) else kind
        installed.append(await apply_crd(client, manifest, timeout=timeout))
    return installed
