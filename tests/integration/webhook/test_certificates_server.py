"""Self-managed webhook certificates against the real API server: Secret, races, caBundles."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.api import kinds
from setpoint.api.kinds import BUILTIN_RESOURCES
from setpoint.client import Client, NotFound
from setpoint.testing.waits import eventually
from setpoint.tls.certs import read_certificates
from setpoint.webhook.certificates import (
    MANAGED_ANNOTATION,
    CertificateState,
    SelfManagedCertificates,
    SelfManagedCertificatesOptions,
)
from tests._support.cert_targets import ca_bundles, crd_with_webhook, validating_configuration
from tests._support.crd_server import is_established, kubectl


@pytest.fixture
async def targets(k8s: Client) -> AsyncIterator[tuple[str, str]]:
    """A CRD with webhook conversion and a ValidatingWebhookConfiguration, deleted afterwards."""
    group = f"certs-{uuid.uuid4().hex[:8]}.test.setpoint.dev"
    crd = await k8s.create(crd_with_webhook(group))
    hooks = await k8s.create(validating_configuration(f"probe-validating-{group}", group))
    await eventually(
        lambda: k8s.get(kinds.CustomResourceDefinition, crd["metadata"]["name"]),
        description="CRD readable",
    )
    try:
        yield crd["metadata"]["name"], hooks["metadata"]["name"]
    finally:
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, crd["metadata"]["name"])
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.ValidatingWebhookConfiguration, hooks["metadata"]["name"])


def options(namespace: str, crd: str, hooks: str, **kwargs: Any) -> SelfManagedCertificatesOptions:
    return SelfManagedCertificatesOptions(
        hosts=("127.0.0.1", "webhook-service.system.svc"),
        secret_namespace=namespace,
        crds=(crd,),
        validating_webhook_configurations=(hooks,),
        **kwargs,
    )


async def test_replicas_starting_at_once_agree_on_one_secret(
    k8s: Client, namespace: str, targets: tuple[str, str]
) -> None:
    """Four replicas load at once: one Secret is created, all serve its pair, caBundles set."""
    crd, hooks = targets
    replicas = [SelfManagedCertificates(k8s, options(namespace, crd, hooks)) for _ in range(4)]
    pairs = await asyncio.gather(*(r.load() for r in replicas))
    secret = await k8s.get(kinds.Secret, "webhook-server-cert", namespace=namespace)
    state = CertificateState.from_secret_data(secret["data"])
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["annotations"][MANAGED_ANNOTATION] == "true"
    assert {p.cert_pem for p in pairs} == {state.serving.cert_pem}
    assert sum(r.rotations for r in replicas) == 1
    assert ca_bundles(await k8s.get(kinds.CustomResourceDefinition, crd)) == [state.ca_bundle]
    assert ca_bundles(await k8s.get(kinds.ValidatingWebhookConfiguration, hooks)) == [
        state.ca_bundle
    ]
    # The API server accepted the CRD with the injected caBundle.
    assert is_established(await k8s.get(kinds.CustomResourceDefinition, crd))
    # The built-in table's entries for webhook configurations match discovery.
    for kind in (kinds.ValidatingWebhookConfiguration, kinds.MutatingWebhookConfiguration):
        served = await k8s.resource_info(kind)
        assert (served.plural, served.namespaced) == (
            BUILTIN_RESOURCES[kind].plural,
            BUILTIN_RESOURCES[kind].namespaced,
        )


async def test_an_overwritten_ca_bundle_is_written_back(
    k8s: Client,
    namespace: str,
    targets: tuple[str, str],
    kubeconfig_path: Path,
    tmp_path: Path,
) -> None:
    """kubectl replace with the manifests (no caBundle) is undone by the running watch."""
    crd, hooks = targets
    certs = SelfManagedCertificates(k8s, options(namespace, crd, hooks))
    await certs.load()
    await certs.sync()
    assert set(certs.injection.values()) == {"up to date"}
    injections = certs.injections
    task = asyncio.create_task(certs.watch(lambda pair: None))
    try:
        current = await k8s.get(kinds.ValidatingWebhookConfiguration, hooks)
        manifest = validating_configuration(hooks, current["webhooks"][0]["name"].split(".", 2)[2])
        path = tmp_path / "hooks.yaml"
        path.write_text(yaml.safe_dump(manifest))
        kubectl(kubeconfig_path, "replace", "-f", str(path))

        async def written_back() -> bool:
            obj = await k8s.get(kinds.ValidatingWebhookConfiguration, hooks)
            return certs.injections > injections and ca_bundles(obj) == [certs.ca_bundle]

        await eventually(written_back, timeout=20, description="caBundle written back")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_renewals_by_concurrent_replicas_converge(
    k8s: Client, namespace: str, targets: tuple[str, str]
) -> None:
    """Replicas that find the certificate due at once leave one renewed certificate behind."""
    crd, hooks = targets
    now = dt.datetime.now(dt.UTC)
    first = SelfManagedCertificates(k8s, options(namespace, crd, hooks))
    original = await first.load()
    later = now + dt.timedelta(days=300)
    replicas = [
        SelfManagedCertificates(k8s, options(namespace, crd, hooks), now=lambda: later)
        for _ in range(3)
    ]
    await asyncio.gather(*(r.sync() for r in replicas))
    secret = await k8s.get(kinds.Secret, "webhook-server-cert", namespace=namespace)
    state = CertificateState.from_secret_data(secret["data"])
    assert state.serving != original
    assert {r.state for r in replicas} == {state}
    assert sum(r.rotations for r in replicas) == 1
    assert read_certificates(state.serving.cert_pem)[0].not_after > later + dt.timedelta(days=364)
    assert state.ca_bundle == first.ca_bundle  # the CA did not change
