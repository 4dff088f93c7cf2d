"""Admission webhooks for a built-in kind against the real API server: Pods as dicts.

:class:`~tests._support.pod_webhooks.SidecarInjector` (a ``CustomDefaulter[dict[str, Any]]``
of ``sp.kinds.Pod``) and :class:`~tests._support.pod_webhooks.LimitsRequired` (a validator)
are served by a :class:`~setpoint.testing.LocalWebhook` on loopback, with the configurations
``setpoint generate webhook``'s code writes for them (a URL clientConfig). Their namespace
selector limits them to namespaces labelled ``pod-webhooks.test.setpoint.dev/enabled=true``:
only the tests' own namespaces, on a plane others share. The plane runs no kubelet, so the
Pods stay Pending; admission is all that is tested.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.admission import admission_spec_of
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import ApiError, Client, NotFound
from setpoint.client.patch import MergePatch
from setpoint.crd import WebhookClientConfig, webhook_configurations
from setpoint.crd.webhooks import admission_policies
from setpoint.testing import LocalWebhook, eventually
from tests._support.kubectl import run_kubectl
from tests._support.pod_webhooks import (
    INJECTED_LABEL,
    NAMESPACE_LABEL,
    POLICY_LABEL,
    SIDECAR,
    SIDECAR_NAME,
    SKIP_LABEL,
    LimitsPolicy,
    LimitsRequired,
    SidecarInjector,
)

SUFFIX = uuid.uuid4().hex[:6]
VALIDATING = f"pods-validating-{SUFFIX}"
MUTATING = f"pods-mutating-{SUFFIX}"
LIMITS = {"limits": {"cpu": "100m", "memory": "64Mi"}}


def pod(name: str, namespace: str, *containers: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"containers": list(containers), "automountServiceAccountToken": False},
    }


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def webhooks(k8s: Client) -> AsyncIterator[LocalWebhook]:
    """Both Pod webhook configurations, installed; removed after the module."""
    async with LocalWebhook() as hook:
        hook.server.add_admission(SidecarInjector(), LimitsRequired())
        configurations = webhook_configurations(
            [admission_spec_of(SidecarInjector), admission_spec_of(LimitsRequired)],
            client_config=WebhookClientConfig(url=hook.server.url(""), ca_bundle=hook.ca.cert_pem),
            validating_name=VALIDATING,
            mutating_name=MUTATING,
        )
        try:
            for configuration in configurations:
                await k8s.create(configuration)
            yield hook
        finally:
            for kind, name in (
                (kinds.ValidatingWebhookConfiguration, VALIDATING),
                (kinds.MutatingWebhookConfiguration, MUTATING),
            ):
                with contextlib.suppress(NotFound):
                    await k8s.delete(kind, name)


@pytest_asyncio.fixture(loop_scope="session")
async def guarded(webhooks: LocalWebhook, k8s: Client, namespace: str) -> str:
    """The test's namespace, labelled for the webhooks, once a bare Pod there is refused."""
    await k8s.patch(
        kinds.Namespace, namespace, MergePatch({"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})
    )

    await default_service_account(k8s, namespace)

    async def denied() -> bool:
        # The API server picks up configurations and namespace labels asynchronously.
        probe = pod("probe", namespace, {"name": "bare", "image": "nginx:1.27"})
        try:
            await k8s.create(probe, dry_run=True)
        except ApiError as exc:
            return "has no resource limits" in str(exc)
        return False

    await eventually(denied, timeout=60, description="the Pod webhooks in effect")
    return namespace


async def default_service_account(k8s: Client, namespace: str) -> None:
    """Wait for the namespace's ``default`` ServiceAccount, which a Pod needs to be created."""

    async def exists() -> bool:
        try:
            await k8s.get(kinds.ServiceAccount, "default", namespace=namespace)
        except NotFound:
            return False
        return True

    await eventually(exists, timeout=60, description=f"the default ServiceAccount in {namespace}")


async def test_a_pod_gets_the_label_and_the_sidecar_and_kubectl_shows_the_warning(
    guarded: str, kubeconfig_path: Path, k8s: Client
) -> None:
    """kubectl creates a Pod with limits: stored labelled, with the sidecar; warning printed.

    The mutating webhook's JSON patch is applied by the API server before the validator
    runs (which sees the sidecar, with its limits, and accepts the Pod); the validator's
    warning about the untagged image reaches kubectl through the answer's Warning header.
    A Pod carrying the skip label is not sent to the injector (its object selector).
    """
    app = {"name": "app", "image": "example.com/shop/web", "resources": LIMITS}
    body = orjson.dumps(pod("web", guarded, app, team="shop"))
    code, stdout, stderr = await run_kubectl(kubeconfig_path, "create", "-f", "-", stdin=body)
    assert code == 0, stderr
    assert "pod/web created" in stdout
    assert (
        "Warning: container 'app': image 'example.com/shop/web' has no tag; pin a version"
    ) in stderr
    stored = await k8s.get(kinds.Pod, "web", namespace=guarded)
    assert stored["metadata"]["labels"] == {"team": "shop", INJECTED_LABEL: SIDECAR_NAME}
    containers = stored["spec"]["containers"]
    assert [c["name"] for c in containers] == ["app", SIDECAR_NAME]
    assert containers[1]["image"] == SIDECAR["image"]
    assert containers[1]["resources"]["limits"] == {"cpu": "50m", "memory": "32Mi"}
    # The API server defaulted the injected container as it does any other.
    assert containers[1]["terminationMessagePolicy"] == "File"

    plain = {"name": "app", "image": "nginx:1.27", "resources": LIMITS}
    await k8s.create(pod("skipped", guarded, plain, **{SKIP_LABEL: "yes"}))
    skipped = await k8s.get(kinds.Pod, "skipped", namespace=guarded)
    assert [c["name"] for c in skipped["spec"]["containers"]] == ["app"]
    assert INJECTED_LABEL not in skipped["metadata"]["labels"]


async def test_a_pod_without_limits_is_refused_with_the_reason_and_warnings(
    guarded: str, kubeconfig_path: Path, k8s: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """No limits: kubectl and the setpoint client both get the denial and the warning.

    The denial names the container and the field; the warning travels with it as an HTTP
    Warning header, which kubectl prints and setpoint's client logs. Nothing is stored.
    """
    bare = {"name": "app", "image": "nginx"}
    body = orjson.dumps(pod("unbounded", guarded, bare))
    code, _, stderr = await run_kubectl(kubeconfig_path, "create", "-f", "-", stdin=body)
    assert code == 1
    assert (
        'admission webhook "limits.pods.test.setpoint.dev" denied the request: '
        "spec.containers[app].resources.limits: container 'app' has no resource limits"
    ) in stderr
    assert "Warning: container 'app': image 'nginx' has no tag; pin a version" in stderr

    with caplog.at_level(logging.WARNING, logger="setpoint.client"):
        try:
            await k8s.create(pod("unbounded", guarded, bare))
        except ApiError as exc:
            assert exc.code == 403
            assert "container 'app' has no resource limits" in str(exc)
        else:
            raise AssertionError("the Pod without limits was created")
    warned = [r.getMessage() for r in caplog.records if "API server warning" in r.getMessage()]
    assert any("image 'nginx' has no tag" in message for message in warned), warned
    with pytest.raises(NotFound):
        await k8s.get(kinds.Pod, "unbounded", namespace=guarded)


async def test_pods_elsewhere_are_not_sent_to_the_webhooks(
    webhooks: LocalWebhook, k8s: Client, namespace: str
) -> None:
    """A namespace without the label: a Pod without limits is stored unchanged.

    The namespace selector keeps the webhooks off every other namespace of the shared plane.
    """

    await default_service_account(k8s, namespace)
    created = await k8s.create(pod("free", namespace, {"name": "app", "image": "nginx"}))
    assert [c["name"] for c in created["spec"]["containers"]] == ["app"]
    assert INJECTED_LABEL not in (created["metadata"].get("labels") or {})


async def test_a_cel_validator_is_a_policy_the_api_server_runs_without_a_webhook(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """LimitsPolicy's generated ValidatingAdmissionPolicy refuses a Pod without limits.

    The validator declares its rule as CEL (``sp.CelValidation``), so ``setpoint generate
    webhook`` writes a ValidatingAdmissionPolicy and its binding instead of a webhook: no
    webhook server takes part. kubectl shows the policy's message expression; a Pod with
    limits is created.
    """
    documents = admission_policies([admission_spec_of(LimitsPolicy)])
    assert [d["kind"] for d in documents] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    gvks = [GroupVersionKind.from_api_version(d["apiVersion"], d["kind"]) for d in documents]
    name = documents[0]["metadata"]["name"]
    for gvk in reversed(gvks):  # left over by an interrupted run
        with contextlib.suppress(NotFound):
            await k8s.delete(gvk, name)
    for document in documents:
        await k8s.create(document)
    try:
        await k8s.patch(
            kinds.Namespace, namespace, MergePatch({"metadata": {"labels": {POLICY_LABEL: "true"}}})
        )
        await default_service_account(k8s, namespace)
        bare = pod("unbounded", namespace, {"name": "app", "image": "nginx:1.27"})

        answers: list[str] = []

        async def refused() -> bool:
            try:
                await k8s.create(bare, dry_run=True)
            except ApiError as exc:
                answers.append(str(exc))
                return "container 'app' has no resource limits" in str(exc)
            answers.append("created")
            return False

        try:
            await eventually(refused, timeout=60, description="the policy in effect")
        except Exception:
            status = (await k8s.get(gvks[0], name)).get("status")
            raise AssertionError(f"policy status {status}; last answer {answers[-1:]}") from None
        code, _, stderr = await run_kubectl(
            kubeconfig_path, "create", "-f", "-", stdin=orjson.dumps(bare)
        )
        assert code == 1
        assert (
            f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: "
            "container 'app' has no resource limits"
        ) in stderr, stderr
        limited = {"name": "app", "image": "nginx:1.27", "resources": LIMITS}
        created = await k8s.create(pod("bounded", namespace, limited))
        assert created["metadata"]["name"] == "bounded"
    finally:
        for gvk in reversed(gvks):
            with contextlib.suppress(NotFound):
                await k8s.delete(gvk, name)
