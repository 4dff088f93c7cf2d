"""A whole operator run recorded on the real API server: not one secret byte in the file.

Issue 27, finding 3. The operator runs in a manager with ``ManagerOptions.record`` (what
``setpoint run --record`` sets). Its informer lists and watches Secrets (kube-apiserver
sends list items without ``kind``); its reconcile lists Secrets, rotates a password with a
merge patch, a strategic merge patch, a JSON patch and a server-side apply, loads two
kubeconfigs from a Secret (:func:`setpoint.client.kubeconfig_from_secret`), asks for a
ServiceAccount token and reviews it; its webhook server's self-managed certificates are
renewed every few seconds and the CA once, so the CA key and serving keys are written to a
Secret again and again. Every secret value is then searched for in the file: as written to
the server (base64), decoded, and for keys every line of their PEM body.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.client import Client, load_kubeconfig
from setpoint.client.kubeconfig import kubeconfig_from_secret
from setpoint.client.patch import ApplyPatch, JsonPatch, MergePatch, StrategicMergePatch
from setpoint.controller import Context, Request
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability import recording
from setpoint.observability.recording import REDACTED
from setpoint.testing import eventually, run_operator
from setpoint.tls.certs import CertificateAuthority, read_certificates
from setpoint.webhook import WebhookServerOptions
from setpoint.webhook.certificates import (
    CA_KEY_KEY,
    TLS_KEY_KEY,
    SelfManagedCertificates,
    SelfManagedCertificatesOptions,
)

SECOND = dt.timedelta(seconds=1)
TOKEN_REVIEW = GroupVersionKind("authentication.k8s.io", "v1", "TokenReview")
FIELD_MANAGER = "recording-test"

# Plain secret values: each must reach neither the file nor, base64-encoded, any line of it.
PASSWORD = "db-password-f3a1c9"
MERGED = "merge-patched-7b2e40"
STRATEGIC = "strategic-patched-9c1d77"
JSON_PATCHED = "json-patched-5e8a13"
APPLIED = "applied-by-ssa-2f6b90"
MEMBER_TOKEN = "member-bearer-token-0d4c8e"


def b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def needles(value: str | bytes) -> set[str]:
    """The forms of one secret that must not appear: as is, base64, and for PEM every line."""
    text = value.decode() if isinstance(value, bytes) else value
    forms = {text, b64(text), text.replace("\n", "\\n")}
    encoded = b64(text)
    forms.update(encoded[i : i + 48] for i in range(0, max(len(encoded) - 48, 1), 48))
    if "-----BEGIN" in text:
        forms.update(line for line in text.splitlines() if len(line) >= 32 and "-----" not in line)
    return {form for form in forms if len(form) >= 12}


def kubeconfig(plane: dict[str, Any], user: dict[str, str]) -> str:
    """A member cluster's kubeconfig: the plane's server and CA, and ``user``'s credentials."""
    cluster = plane["clusters"][0]["cluster"]
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "member", "cluster": cluster}],
            "users": [{"name": "member-user", "user": user}],
            "contexts": [
                {"name": "member", "context": {"cluster": "member", "user": "member-user"}}
            ],
            "current-context": "member",
        }
    )


@pytest.fixture
def plane(kubeconfig_path: Path) -> dict[str, Any]:
    """The session plane's admin kubeconfig, parsed (its server and CA go into members')."""
    parsed: dict[str, Any] = yaml.safe_load(kubeconfig_path.read_text())
    return parsed


async def test_an_operator_run_with_recording_writes_no_secret_byte(
    kubeconfig_path: Path, plane: dict[str, Any], k8s: Client, namespace: str, tmp_path: Path
) -> None:
    """Lists, patches, kubeconfigs, tokens and certificate rotation: all redacted, 0600."""
    path = tmp_path / "operator.jsonl"
    secrets: set[str] = set()
    member = CertificateAuthority("member-ca").client_cert("member-admin")
    cert_user = {
        "client-certificate-data": b64(member.cert_pem),
        "client-key-data": b64(member.key_pem),
    }
    cert_config = kubeconfig(plane, cert_user)
    token_config = kubeconfig(plane, {"token": MEMBER_TOKEN})
    for value in (PASSWORD, MERGED, STRATEGIC, JSON_PATCHED, APPLIED, MEMBER_TOKEN):
        secrets |= needles(value)
    secrets |= needles(member.key_pem) | needles(cert_config) | needles(token_config)

    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db", "namespace": namespace, "labels": {"app": "db"}},
            "data": {"password": b64(PASSWORD), "api-key": b64(PASSWORD + "-api")},
        }
    )
    secrets |= needles(PASSWORD + "-api")
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "member-kubeconfig", "namespace": namespace},
            "data": {"value": b64(cert_config), "token": b64(token_config)},
        }
    )
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "operator", "namespace": namespace},
        }
    )

    live = Client(load_kubeconfig(str(kubeconfig_path)))
    certs = SelfManagedCertificates(
        live,
        SelfManagedCertificatesOptions(
            hosts=("127.0.0.1",),
            secret_name="webhook-cert",
            secret_namespace=namespace,
            # Serving certificates renewed every ~2 s, the CA at ~6 s (taking over 1 s later).
            ca_validity=8 * SECOND,
            cert_validity=4 * SECOND,
            renew_before=2 * SECOND,
            ca_handover=1 * SECOND,
            resync_interval=60 * SECOND,
        ),
    )
    done = asyncio.Event()
    problems: list[str] = []
    loaded: list[str] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        if request.namespace != namespace or request.name != "db" or done.is_set():
            return
        try:
            listed = await ctx.client.list(kinds.Secret, namespace=namespace)
            assert {s["metadata"]["name"] for s in listed} >= {"db", "member-kubeconfig"}
            await ctx.client.patch(
                kinds.Secret,
                "db",
                MergePatch({"data": {"password": b64(MERGED)}}),
                namespace=namespace,
            )
            await ctx.client.patch(
                kinds.Secret,
                "db",
                StrategicMergePatch({"stringData": {"password": STRATEGIC}}),
                namespace=namespace,
            )
            await ctx.client.patch(
                kinds.Secret,
                "db",
                JsonPatch(
                    [{"op": "replace", "path": "/data/password", "value": b64(JSON_PATCHED)}]
                ),
                namespace=namespace,
            )
            await ctx.client.patch(
                kinds.Secret,
                "db",
                ApplyPatch(
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "db", "namespace": namespace},
                        "stringData": {"applied": APPLIED},
                    },
                    force=True,
                ),
                namespace=namespace,
                field_manager=FIELD_MANAGER,
            )
            for key in ("value", "token"):
                config = await kubeconfig_from_secret(
                    ctx.client, "member-kubeconfig", namespace=namespace, key=key
                )
                loaded.append(config.server)
            issued = await live.create_subresource(
                kinds.ServiceAccount,
                "operator",
                "token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
                namespace=namespace,
            )
            token = issued["status"]["token"]
            secrets.update(needles(token))
            review_body: JsonObject = {
                "apiVersion": TOKEN_REVIEW.api_version,
                "kind": "TokenReview",
                "spec": {"token": token},
            }
            review = await live.create(review_body)
            assert review["status"]["authenticated"], review
        except Exception as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
        done.set()

    def setup(manager: Manager) -> None:
        manager.webhook_server  # noqa: B018 - the server (and its certificates) runs with the manager
        manager.controller("secrets").for_(kinds.Secret).build(reconcile)

    options = ManagerOptions(
        record=recording.RecordOptions(path=path),
        webhook_server=WebhookServerOptions(bind_address="127.0.0.1:0", certificate=certs),
    )
    cas: set[str] = set()
    try:
        async with run_operator(setup, client=live, options=options):
            await asyncio.wait_for(done.wait(), 60)

            async def rotated() -> bool:
                state = certs.state
                if state is not None:
                    secrets.update(needles(state.ca_key) | needles(state.serving.key_pem))
                    cas.update(c.fingerprint for c in read_certificates(state.ca_bundle))
                return len(cas) >= 2 and certs.rotations >= 4

            await eventually(
                rotated, timeout=60, interval=0.05, description="serving renewals and a new CA"
            )
    finally:
        await live.close()
    assert problems == []
    assert len(loaded) == 2
    stored = await k8s.get(kinds.Secret, "webhook-cert", namespace=namespace)
    for key in (CA_KEY_KEY, TLS_KEY_KEY):
        secrets.update(needles(base64.b64decode(stored["data"][key])))

    raw = path.read_bytes()
    leaked = sorted(s for s in secrets if s.encode() in raw)
    assert leaked == [], f"{len(leaked)} secret forms reached the recording, e.g. {leaked[:3]}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    # The recording holds what the run did (so the search above had something to search).
    entries = recording.load(path)
    requests = [e for e in entries if e["type"] == "request"]

    def sent(method: str, suffix: str) -> list[dict[str, Any]]:
        return [r for r in requests if r["method"] == method and r["path"].endswith(suffix)]

    lists = [
        r
        for r in sent("GET", "/secrets")
        if any(item["metadata"]["name"] == "db" for item in (r["response"] or {}).get("items", []))
    ]
    assert lists, "no list of the namespace's Secrets was recorded"
    item = next(i for i in lists[0]["response"]["items"] if i["metadata"]["name"] == "db")
    assert "kind" not in item  # as kube-apiserver sends it: redacted by the request's path
    assert set(item["data"].values()) == {REDACTED}
    assert len(sent("PATCH", f"/namespaces/{namespace}/secrets/db")) == 4
    assert sent("GET", f"/namespaces/{namespace}/secrets/member-kubeconfig")
    assert sent("POST", f"/namespaces/{namespace}/serviceaccounts/operator/token")
    assert sent("POST", "/tokenreviews")
    cert_writes = [
        r
        for r in requests
        if r["method"] in ("POST", "PUT")
        and f"/namespaces/{namespace}/secrets" in r["path"]
        and (r["body"] or {}).get("metadata", {}).get("name") == "webhook-cert"
    ]
    assert len(cert_writes) >= 4, "the certificate rotations were not recorded"
    assert all(r["body"]["data"][CA_KEY_KEY] == REDACTED for r in cert_writes)
    events = [e for e in entries if e["type"] == "event" and e["kind"] == "v1, Kind=Secret"]
    assert any(e["object"]["metadata"]["name"] == "db" for e in events)
