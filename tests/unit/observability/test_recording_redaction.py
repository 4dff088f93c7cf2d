"""What a recording redacts, by what an answer or a body is (issue 27, finding 3).

Each test writes through the recorder's hooks (``Recorder.request``, ``Recorder.event``), as
the transport and the informers call them, then searches the file's bytes for every secret
value: as sent (base64 for a Secret's ``data``) and decoded. The shapes are the ones
kube-apiserver really sends: list items carry no ``kind``, patches carry no ``kind``.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from setpoint.observability import recording
from setpoint.observability.recording import REDACTED, Recorder
from setpoint.tls.certs import CertificateAuthority

PASSWORD = "hunter2-very-secret"
KUBECONFIG_KEY = (
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIAbcdefkubeconfig\n-----END EC PRIVATE KEY-----\n"
)
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXNlY3JldA"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def record(tmp_path: Path, write: Callable[[Recorder], None]) -> tuple[bytes, list[dict[str, Any]]]:
    """The file's bytes and entries after ``write`` used the recorder."""
    path = tmp_path / "r.jsonl"
    with recording.recording(recording.RecordOptions(path=path)) as recorder:
        write(recorder)
    return path.read_bytes(), recording.load(path)


def assert_no_secret(raw: bytes, *secrets: str) -> None:
    """No secret reaches the file: neither as given, nor base64-encoded, nor decoded."""
    for secret in secrets:
        forms = {secret, b64(secret)}
        with contextlib.suppress(ValueError):  # the secret is base64: its decoded bytes too
            forms.add(base64.b64decode(secret, validate=True).decode())
        for form in forms:
            # JSON escapes newlines: search the escaped form too.
            for needle in (form, form.replace("\n", "\\n")):
                assert needle.encode() not in raw, f"{needle[:40]!r} reached the recording"


def secret_item(name: str, data: dict[str, str]) -> dict[str, Any]:
    """A Secret as kube-apiserver puts it into a list: no ``kind``, no ``apiVersion``."""
    return {
        "metadata": {
            "name": name,
            "namespace": "prod",
            "resourceVersion": "41",
            "uid": "u-1",
            "labels": {"app": "db"},
            "annotations": {"owner": "team-a"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "type": "Opaque",
        "data": {key: b64(value) for key, value in data.items()},
    }


@pytest.mark.parametrize(
    "path",
    ["/api/v1/namespaces/prod/secrets", "/api/v1/secrets"],
    ids=["namespaced", "cluster-wide"],
)
def test_a_secret_list_answer_keeps_names_and_keys_and_hides_values(
    tmp_path: Path, path: str
) -> None:
    """Items of a list answer have no kind: the request's path says they are Secrets."""
    answer = {
        "kind": "SecretList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "42"},
        "items": [
            secret_item("db", {"password": PASSWORD}),
            secret_item("kube", {"value": KUBECONFIG_KEY}),
        ],
    }

    def write(recorder: Recorder) -> None:
        recorder.request(
            "GET", path, params={"limit": "500"}, body=None, status=200, response=answer
        )

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, PASSWORD, KUBECONFIG_KEY)
    (entry,) = entries
    assert entry["response"]["metadata"] == {"resourceVersion": "42"}
    assert entry["response"]["items"][0] == {
        "metadata": {
            "name": "db",
            "namespace": "prod",
            "resourceVersion": "41",
            "uid": "u-1",
            "labels": {"app": "db"},
            "annotations": {"owner": "team-a"},
        },
        "type": "Opaque",
        "data": {"password": REDACTED},
    }
    assert entry["response"]["items"][1]["data"] == {"value": REDACTED}
    assert entry["params"] == {"limit": "500"}


def test_a_secret_list_is_recognised_by_its_own_kind_wherever_it_came_from() -> None:
    """A ``SecretList`` read through any path (a proxy, an aggregated API) is redacted too."""
    listed = {"kind": "SecretList", "items": [secret_item("db", {"password": PASSWORD})]}
    assert recording.redact(listed)["items"][0]["data"] == {"password": REDACTED}
    mixed = {"kind": "List", "items": [{"kind": "Secret", **secret_item("db", {"k": PASSWORD})}]}
    assert recording.redact(mixed)["items"][0]["data"] == {"k": REDACTED}


@pytest.mark.parametrize("event", ["add", "update", "delete"])
def test_informer_events_of_secrets_are_redacted_by_the_informer_kind(
    tmp_path: Path, event: str
) -> None:
    """The informer names the kind; the object itself (from a list) may carry none."""

    def write(recorder: Recorder) -> None:
        recorder.event("v1, Kind=Secret", event, secret_item("db", {"password": PASSWORD}))

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, PASSWORD)
    assert entries[0]["object"]["data"] == {"password": REDACTED}
    assert entries[0]["object"]["metadata"]["name"] == "db"


SECRET_PATH = "/api/v1/namespaces/prod/secrets/db"
ANSWER = {"kind": "Secret", "apiVersion": "v1", **secret_item("db", {"password": PASSWORD})}


@pytest.mark.parametrize(
    ("method", "body"),
    [
        pytest.param("PATCH", {"data": {"password": b64(PASSWORD)}}, id="merge"),
        pytest.param(
            "PATCH",
            {"stringData": {"password": PASSWORD}, "metadata": {"labels": {"a": "b"}}},
            id="strategic",
        ),
        pytest.param(
            "PATCH",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db", "namespace": "prod"},
                "stringData": {"password": PASSWORD},
            },
            id="apply",
        ),
        pytest.param(
            "PATCH",
            [
                {"op": "test", "path": "/data/password", "value": b64(PASSWORD)},
                {"op": "replace", "path": "/data/password", "value": b64(PASSWORD)},
                {"op": "add", "path": "/data", "value": {"password": b64(PASSWORD)}},
                {"op": "add", "path": "/stringData/password", "value": PASSWORD},
                {"op": "replace", "path": "", "value": {"data": {"password": b64(PASSWORD)}}},
            ],
            id="json-patch",
        ),
        pytest.param(
            "PUT",
            {"metadata": {"name": "db", "resourceVersion": "41"}, "data": {"k": b64(PASSWORD)}},
            id="update-without-kind",
        ),
        pytest.param(
            "POST",
            {"metadata": {"name": "db"}, "stringData": {"k": PASSWORD}},
            id="create-without-kind",
        ),
    ],
)
def test_bodies_sent_to_secrets_are_redacted_whatever_the_patch_type(
    tmp_path: Path, method: str, body: Any
) -> None:
    path = "/api/v1/namespaces/prod/secrets" if method == "POST" else SECRET_PATH

    def write(recorder: Recorder) -> None:
        recorder.request(
            method,
            path,
            params={"fieldManager": "op"},
            body=body,
            status=200,
            response=ANSWER,
        )

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, PASSWORD)
    assert entries[0]["response"]["data"] == {"password": REDACTED}


def test_a_json_patch_keeps_its_operations_and_paths_and_metadata_values() -> None:
    """What a replay or a reader needs: which fields changed; never the values of data."""
    ops = [
        {"op": "replace", "path": "/data/password", "value": b64(PASSWORD)},
        {"op": "add", "path": "/metadata/labels/tier", "value": "gold"},
        {"op": "remove", "path": "/data/old"},
        {"op": "move", "from": "/data/a", "path": "/data/b"},
    ]
    assert recording.redact(ops, path=SECRET_PATH) == [
        {"op": "replace", "path": "/data/password", "value": REDACTED},
        {"op": "add", "path": "/metadata/labels/tier", "value": "gold"},
        {"op": "remove", "path": "/data/old"},
        {"op": "move", "from": "/data/a", "path": "/data/b"},
    ]


def test_kubectls_last_applied_annotation_of_a_secret_is_redacted() -> None:
    """``kubectl apply`` copies the whole Secret, data included, into an annotation."""
    annotation = "kubectl.kubernetes.io/last-applied-configuration"
    applied = f'{{"apiVersion":"v1","data":{{"password":"{b64(PASSWORD)}"}},"kind":"Secret"}}'
    secret = secret_item("db", {"password": PASSWORD})
    secret["metadata"]["annotations"][annotation] = applied
    out = recording.redact(secret, path=SECRET_PATH)
    assert out["metadata"]["annotations"] == {"owner": "team-a", annotation: REDACTED}
    patch = [
        {
            "op": "add",
            "path": "/metadata/annotations/" + annotation.replace("/", "~1"),
            "value": applied,
        }
    ]
    assert recording.redact(patch, path=SECRET_PATH)[0]["value"] == REDACTED


def test_token_requests_and_reviews_are_redacted_by_path_and_by_kind(tmp_path: Path) -> None:
    """TokenRequest answers and TokenReview requests and answers, with or without kind."""
    token_path = "/api/v1/namespaces/prod/serviceaccounts/op/token"
    review_path = "/apis/authentication.k8s.io/v1/tokenreviews"

    def write(recorder: Recorder) -> None:
        recorder.request(
            "POST",
            token_path,
            params=None,
            body={"spec": {"audiences": ["api"], "expirationSeconds": 600}},
            status=201,
            response={"status": {"token": JWT, "expirationTimestamp": "2030-01-01T00:00:00Z"}},
        )
        recorder.request(
            "POST",
            review_path,
            params=None,
            body={"kind": "TokenReview", "spec": {"token": JWT}},
            status=201,
            response={
                "kind": "TokenReview",
                "spec": {"token": JWT},
                "status": {"authenticated": True, "user": {"username": "system:sa"}},
            },
        )

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, JWT)
    assert entries[0]["body"] == {"spec": {"audiences": ["api"], "expirationSeconds": 600}}
    assert entries[0]["response"]["status"] == {
        "token": REDACTED,
        "expirationTimestamp": "2030-01-01T00:00:00Z",
    }
    assert entries[1]["response"]["status"]["user"] == {"username": "system:sa"}


def test_fields_named_like_a_credential_are_redacted_in_any_object(tmp_path: Path) -> None:
    """ConfigMaps, custom resources, kubeconfig-shaped data: by the field's name."""
    values = [f"{PASSWORD}-{i}" for i in range(12)]
    config_map = {
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "prod"},
        "data": {
            "password": values[0],
            "tls.key": values[1],
            "ca.key": values[2],
            "log-level": "debug",
        },
    }
    custom = {
        "kind": "Backup",
        "metadata": {"name": "b", "namespace": "prod"},
        "spec": {
            "target": {
                "bearerToken": values[3],
                "clientSecret": values[4],
                "privateKey": values[5],
                "apiKey": values[6],
                "secretAccessKey": values[7],
                "credentials": {"user": "u", "pass": values[8]},
            },
            "secretName": "creds",
            "secretKeyRef": {"name": "creds", "key": "password"},
            "tokenExpirationSeconds": 600,
            "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]},
        },
    }
    kubeconfig = {
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": "Y2VydA==",
                    "client-key-data": values[9],
                    "token": values[10],
                    "password": values[11],
                    "username": "admin",
                },
            }
        ]
    }

    def write(recorder: Recorder) -> None:
        recorder.request(
            "PUT",
            "/api/v1/namespaces/prod/configmaps/cm",
            params=None,
            body=config_map,
            status=200,
            response=config_map,
        )
        recorder.event("example.com/v1, Kind=Backup", "add", custom)
        recorder.request(
            "POST",
            "/apis/example.com/v1/namespaces/prod/kubeconfigs",
            params=None,
            body=kubeconfig,
            status=201,
            response=None,
        )

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, *values)
    assert entries[0]["response"]["data"] == {
        "password": REDACTED,
        "tls.key": REDACTED,
        "ca.key": REDACTED,
        "log-level": "debug",
    }
    spec = entries[1]["object"]["spec"]
    assert spec["secretName"] == "creds"
    assert spec["secretKeyRef"] == {"name": "creds", "key": "password"}
    assert spec["tokenExpirationSeconds"] == 600
    assert spec["selector"] == custom["spec"]["selector"]  # type: ignore[index]
    assert spec["target"]["credentials"] == {"user": REDACTED, "pass": REDACTED}
    user = entries[2]["body"]["users"][0]["user"]
    assert user["client-certificate-data"] == "Y2VydA=="
    assert user["username"] == "admin"


def test_values_shaped_like_a_credential_are_redacted_under_any_name(tmp_path: Path) -> None:
    """A private key (PEM or base64 PEM) or a JWT under an innocent name."""
    annotations = {
        "pem": "bundle:\n" + KUBECONFIG_KEY,
        "encoded": b64(KUBECONFIG_KEY),
        "jwt": f"issued {JWT}",
        "plain": "nothing to hide",
    }

    def write(recorder: Recorder) -> None:
        recorder.event(
            "v1, Kind=ConfigMap",
            "add",
            {
                "metadata": {"name": "cm", "annotations": annotations},
                "data": {"x": annotations["encoded"]},
            },
        )

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, KUBECONFIG_KEY, JWT)
    assert entries[0]["object"]["metadata"]["annotations"]["plain"] == "nothing to hide"


def test_an_error_status_keeps_its_reason_and_loses_credentials_in_its_message(
    tmp_path: Path,
) -> None:
    status = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": f'Secret "db" is invalid: token: {JWT}; password={PASSWORD}',
        "details": {"causes": [{"field": "data", "message": f"Authorization: Bearer {PASSWORD}"}]},
    }

    def write(recorder: Recorder) -> None:
        recorder.request("PUT", SECRET_PATH, params=None, body=None, status=422, response=status)

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, JWT, PASSWORD)
    response = entries[0]["response"]
    assert response["reason"] == "Invalid" and response["code"] == 422
    assert response["message"].startswith('Secret "db" is invalid')


def test_a_table_answer_of_secrets_hides_the_included_objects_data() -> None:
    table = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "rows": [{"cells": ["db", "Opaque", 1], "object": secret_item("db", {"k": PASSWORD})}],
    }
    out = recording.redact(table, path="/api/v1/namespaces/prod/secrets")
    assert out["rows"][0]["object"]["data"] == {"k": REDACTED}
    assert out["rows"][0]["cells"] == ["db", "Opaque", 1]


def test_redaction_is_idempotent_and_leaves_other_kinds_alone() -> None:
    config = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    assert recording.redact(config) == config
    once = recording.redact(ANSWER, path=SECRET_PATH)
    assert recording.redact(once, path=SECRET_PATH) == once
    assert recording.redact(ANSWER) == once  # by kind, without a path


def test_certificates_are_kept_and_a_key_bundled_after_one_is_not() -> None:
    """caBundles and tls.crt are public; a base64 bundle of a certificate then a key is not."""
    pair = CertificateAuthority("redaction-test-ca").client_cert("someone")
    bundle = b64(pair.cert_pem.decode())
    webhook = {
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "hooks"},
        "webhooks": [{"name": "a.example.com", "clientConfig": {"caBundle": bundle}}],
    }
    assert recording.redact(webhook) == webhook
    both = b64((pair.cert_pem + pair.key_pem).decode())
    holder = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"bundle.pem": both}}
    assert recording.redact(holder)["data"] == {"bundle.pem": REDACTED}


def test_a_typed_body_is_redacted_as_its_json_not_written_as_its_repr(tmp_path: Path) -> None:
    """A pydantic object would otherwise reach the file through ``str()``, secrets and all."""

    class Credentials(BaseModel):
        user: str
        password: str

    def write(recorder: Recorder) -> None:
        recorder.request(
            "POST",
            "/apis/example.com/v1/namespaces/prod/logins",
            params=None,
            body={"spec": {"login": Credentials(user="u", password=PASSWORD)}},
            status=201,
            response=None,
        )

    raw, entries = record(tmp_path, write)
    assert_no_secret(raw, PASSWORD)
    assert entries[0]["body"] == {"spec": {"login": {"user": "u", "password": REDACTED}}}


def test_kubectls_last_applied_annotation_of_another_object_is_redacted_inside() -> None:
    """Parsed, redacted as its object, written back: the non-secret fields stay readable."""
    annotation = "kubectl.kubernetes.io/last-applied-configuration"
    data = {"password": PASSWORD, "mode": "fast"}
    applied = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": data}) + "\n"
    config = {"kind": "ConfigMap", "metadata": {"name": "c", "annotations": {annotation: applied}}}
    out = recording.redact(config)["metadata"]["annotations"][annotation]
    assert PASSWORD not in out
    assert json.loads(out)["data"] == {"password": REDACTED, "mode": "fast"}
    assert recording.redact(recording.redact(config)) == recording.redact(config)
