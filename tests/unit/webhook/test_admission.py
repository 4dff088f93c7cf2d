"""Admission webhooks: AdmissionReviews answered by validators and defaulters."""

from __future__ import annotations

import base64
import ssl
from typing import Any

import aiohttp
import orjson
import pytest

from setpoint.observability.metrics import Metrics
from setpoint.server.http import HttpRequest
from setpoint.testing import LocalWebhook
from setpoint.webhook.admission_review import AdmissionWebhook
from tests._support.vessels import (
    CRASH_CAPTAIN,
    GROUP,
    VesselDefaulter,
    VesselValidator,
)

# --------------------------------------------------------------------------- reviews


def vessel(name: str = "ark", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Vessel",
        "metadata": {"name": name, "namespace": "sea", "uid": "u-1"},
        "spec": {"capacity": 2, **spec},
    }


def review(operation: Any = "CREATE", obj: Any = None, old: Any = None, **extra: Any) -> bytes:
    request: dict[str, Any] = {
        "uid": "0d8e-42",
        "kind": {"group": GROUP, "version": "v1", "kind": "Vessel"},
        "resource": {"group": GROUP, "version": "v1", "resource": "vessels"},
        "operation": operation,
        "name": "ark",
        "namespace": "sea",
        "object": obj,
        "oldObject": old,
        "userInfo": {"username": "alice"},
        **extra,
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


async def answer(hook: AdmissionWebhook, body: bytes) -> tuple[int, Any]:
    response = await hook(HttpRequest("POST", hook.spec.path, body=body))
    if response.status != 200:
        return response.status, response.body.decode()
    data = orjson.loads(response.body)
    assert data["apiVersion"] == "admission.k8s.io/v1" and data["kind"] == "AdmissionReview"
    return 200, data["response"]


async def test_a_valid_object_is_allowed_with_the_validators_warnings() -> None:
    """allowed: true, the uid echoed, warnings passed on."""
    status, response = await answer(AdmissionWebhook(VesselValidator()), review(obj=vessel()))
    assert status == 200
    assert response == {
        "uid": "0d8e-42",
        "allowed": True,
        "warnings": ["vessel ark has no captain: nobody is in command"],
    }


async def test_a_denial_carries_the_users_message_code_and_warnings() -> None:
    """Denied -> allowed: false, code 403, the validator's message and warnings."""
    body = review(obj=vessel(crew=["a", "b", "c"], captain="a"))
    _, response = await answer(AdmissionWebhook(VesselValidator()), body)
    assert response["allowed"] is False
    assert response["status"] == {
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": "spec.crew: 3 people do not fit a capacity of 2",
    }
    assert response["warnings"] == ["consider a bigger vessel"]


async def test_an_update_sees_the_old_object() -> None:
    """validate_update(old, new) gets both objects: shrinking capacity is refused."""
    hook = AdmissionWebhook(VesselValidator())
    body = review("UPDATE", obj=vessel(capacity=1, captain="a"), old=vessel(capacity=5))
    _, response = await answer(hook, body)
    assert response["status"]["message"] == "spec.capacity: cannot shrink from 5 to 1"
    _, grown = await answer(
        hook, review("UPDATE", obj=vessel(capacity=9, captain="a"), old=vessel())
    )
    assert grown == {"uid": "0d8e-42", "allowed": True}


async def test_a_bug_in_user_code_is_a_500_denial_and_the_server_goes_on() -> None:
    """An unexpected exception: allowed: false, code 500, naming the webhook and the error."""
    hook = AdmissionWebhook(VesselValidator())
    _, response = await answer(hook, review(obj=vessel(captain=CRASH_CAPTAIN)))
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert (
        "vvessel-v1.admission.test.setpoint.dev webhook failed: RuntimeError"
        in (response["status"]["message"])
    )
    _, after = await answer(hook, review(obj=vessel(captain="a")))
    assert after["allowed"] is True


async def test_an_object_that_does_not_parse_is_a_400_denial_naming_it() -> None:
    """A wrong type in the object: code 400 with the field path."""
    _, response = await answer(
        AdmissionWebhook(VesselValidator()), review(obj=vessel(capacity="lots"))
    )
    assert response["status"]["code"] == 400
    assert (
        "object sea/ark is not a valid Vessel admission.test.setpoint.dev/v1"
        in (response["status"]["message"])
    )
    assert "spec.capacity" in response["status"]["message"]


async def test_operations_the_webhook_does_not_handle_are_allowed() -> None:
    """A DELETE or CONNECT reaching a validator without validate_delete is allowed."""
    hook = AdmissionWebhook(VesselValidator())
    for operation in ("DELETE", "CONNECT"):
        _, response = await answer(hook, review(operation, old=vessel()))
        assert response == {"uid": "0d8e-42", "allowed": True}


def apply_patch(obj: dict[str, Any], patch: str) -> dict[str, Any]:
    from setpoint.testing._fake_patch import json_patch

    return json_patch(obj, orjson.loads(base64.b64decode(patch)))  # type: ignore[no-any-return]


async def test_a_defaulter_answers_with_a_patch_of_what_it_changed() -> None:
    """The patch sets spec.port and spec.crew and touches nothing else."""
    sent = vessel(captain="nemo")
    sent["spec"]["unknownField"] = {"kept": True}
    sent["metadata"]["labels"] = {"a": "1"}
    _, response = await answer(AdmissionWebhook(VesselDefaulter()), review(obj=sent))
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    operations = orjson.loads(base64.b64decode(response["patch"]))
    assert operations == [
        {"op": "add", "path": "/spec/crew", "value": ["nemo"]},
        {"op": "add", "path": "/spec/port", "value": "home"},
    ]
    patched = apply_patch(sent, response["patch"])
    assert patched["spec"] == {
        "capacity": 2,
        "captain": "nemo",
        "unknownField": {"kept": True},
        "crew": ["nemo"],
        "port": "home",
    }


async def test_a_defaulter_with_nothing_to_do_sends_no_patch() -> None:
    """An object already defaulted gets allowed: true and no patch."""
    _, response = await answer(
        AdmissionWebhook(VesselDefaulter()), review(obj=vessel(port="x", crew=["a"]))
    )
    assert response == {"uid": "0d8e-42", "allowed": True}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{", "not JSON"),
        (b"[]", "JSON list, not an AdmissionReview"),
        (
            orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            "v1beta1",
        ),
        (
            orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "ConversionReview"}),
            "kind is",
        ),
        (
            orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "request is",
        ),
        (review(uid=""), "request.uid"),
        (review(uid=7), "request.uid"),
        (review("PATCH"), "request.operation"),
        (review([]), "request.operation is 'list'"),  # unhashable: was a 500
        (review(obj=[1]), "request.object is a JSON list"),
        (review(dryRun="yes"), "request.dryRun"),
    ],
)
async def test_malformed_reviews_get_400_saying_what_is_wrong(body: bytes, fragment: str) -> None:
    """Each malformed body: HTTP 400 naming the problem."""
    status, text = await answer(AdmissionWebhook(VesselValidator()), body)
    assert status == 400
    assert text.startswith("malformed AdmissionReview: ")
    assert fragment in text


async def test_a_review_without_the_object_it_needs_is_a_400_denial() -> None:
    """An UPDATE without oldObject is answered (not crashed on) with code 400."""
    _, response = await answer(AdmissionWebhook(VesselValidator()), review("UPDATE", obj=vessel()))
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "carries no oldObject" in response["status"]["message"]


# --------------------------------------------------------------------------- on the server


async def test_the_server_serves_declared_paths_and_counts_bugs_as_panics() -> None:
    """add_admission registers each declared path; a bug is a 500 denial and one panic."""
    metrics = Metrics.isolated()
    async with LocalWebhook(metrics=metrics) as hook:
        validator, defaulter = hook.server.add_admission(VesselValidator(), VesselDefaulter())
        assert hook.server.paths == (defaulter.spec.path, validator.spec.path)
        ctx = ssl.create_default_context(cadata=hook.ca.cert_pem.decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as http:
            url = hook.server.url(validator.spec.path)
            async with http.post(url, data=review(obj=vessel(captain=CRASH_CAPTAIN))) as resp:
                assert resp.status == 200
                answer = orjson.loads(await resp.read())["response"]
            async with http.post(
                hook.server.url(defaulter.spec.path), data=review(obj=vessel())
            ) as resp:
                patched = orjson.loads(await resp.read())["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 500
    assert patched["allowed"] is True and patched["patchType"] == "JSONPatch"
    assert metrics.value("controller_runtime_webhook_panics_total") == 1
    assert (
        metrics.value(
            "controller_runtime_webhook_requests_total", webhook=validator.spec.path, code="200"
        )
        == 1
    )
    with pytest.raises(ValueError, match="registered already"):
        hook.server.add_admission(VesselValidator())
