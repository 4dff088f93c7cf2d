"""Admission webhooks: ``admission.k8s.io/v1`` AdmissionReviews, answered by declared classes.

The API server sends an AdmissionReview for every create, update or delete a webhook
configuration matches, and waits for ``allowed`` (validating) or a JSON patch (mutating)
before it stores anything. :class:`AdmissionWebhook` answers them for one
:class:`~setpoint.api.admission.CustomValidator` or
:class:`~setpoint.api.admission.CustomDefaulter` instance, which the webhook server
registers on the declared path (``server.add_admission(TenantValidator())``).

What each input gets (:meth:`AdmissionWebhook.review`):

- a well-formed review the webhook allows: ``allowed: true``, the validator's warnings,
  and for a defaulter the ``JSONPatch`` (base64) from the object as sent to the object as
  ``default`` left it, touching only what ``default`` changed;
- a request the validator refuses (:class:`~setpoint.api.admission.Denied` or
  ``ValueError``): ``allowed: false`` with the validator's message, code 403 (or the one
  ``Denied`` gives), and warnings;
- an object that does not parse as the resource class: ``allowed: false``, code 400, naming
  the object and the first problems;
- any other exception in user code: ``allowed: false``, code 500, a message naming the
  webhook and the exception, a log line with the traceback, and one more
  ``controller_runtime_webhook_panics_total``; the server stays up;
- a body that is not an AdmissionReview (not JSON, another apiVersion or kind, no
  ``request``, no ``uid``, an unknown operation, objects that are not JSON objects): HTTP
  400 with a message saying what is wrong.

Every answer echoes the request's ``uid``.
"""

from __future__ import annotations

import base64
import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import orjson
from pydantic import ValidationError

from setpoint.api.admission import (
    AdmissionWebhookSpec,
    CustomDefaulter,
    CustomValidator,
    Denied,
    admission_spec_of,
)
from setpoint.api.jsonvalues import json_equal
from setpoint.api.resource import Resource
from setpoint.client.patch import json_patch_diff
from setpoint.server.http import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from setpoint.observability.metrics import Metrics

__all__ = [
    "ADMISSION_REVIEW_API_VERSION",
    "AdmissionRequest",
    "AdmissionWebhook",
    "MalformedAdmissionReview",
    "parse_admission_review",
]

log = logging.getLogger("setpoint.webhook.admission")

ADMISSION_REVIEW_API_VERSION: Final = "admission.k8s.io/v1"
"""The only AdmissionReview version served (generated configurations say
``admissionReviewVersions: [v1]``)."""

_JSON: Final = "application/json"
_OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
_MAX_ERRORS: Final = 3


class MalformedAdmissionReview(ValueError):
    """The request body is not a usable AdmissionReview; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of an AdmissionReview's ``request`` a webhook reads."""

    uid: str
    """Echoed in the response."""
    operation: str
    """``CREATE``, ``UPDATE``, ``DELETE`` or ``CONNECT``."""
    object: dict[str, Any] | None
    """The object as it would be stored (``None`` for DELETE)."""
    old_object: dict[str, Any] | None
    """The stored object (UPDATE and DELETE), else ``None``."""
    name: str
    """The object's name (may be empty on CREATE with ``generateName``)."""
    namespace: str
    """The object's namespace (empty for cluster-scoped kinds)."""
    dry_run: bool
    """The request will not be persisted."""
    user: str
    """``userInfo.username`` of who made the request."""


def parse_admission_review(body: bytes) -> AdmissionRequest:
    """Parse and check an AdmissionReview body.

    Raises:
        MalformedAdmissionReview: the body is not a usable ``admission.k8s.io/v1``
            AdmissionReview; the message names the field.

    """
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedAdmissionReview(f"the request body is not JSON ({exc})") from None
    if not isinstance(review, dict):
        raise MalformedAdmissionReview(
            f"the request body is a JSON {type(review).__name__}, not an AdmissionReview object"
        )
    api_version, kind = review.get("apiVersion"), review.get("kind")
    if kind != "AdmissionReview":
        raise MalformedAdmissionReview(f"kind is {kind!r}, not 'AdmissionReview'")
    if api_version != ADMISSION_REVIEW_API_VERSION:
        raise MalformedAdmissionReview(
            f"apiVersion {api_version!r} is not served; this webhook answers "
            f"{ADMISSION_REVIEW_API_VERSION} (set admissionReviewVersions: [v1])"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedAdmissionReview("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedAdmissionReview("request.uid is missing or not a non-empty string")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in _OPERATIONS:
        shown = operation if isinstance(operation, str) else type(operation).__name__
        raise MalformedAdmissionReview(
            f"request.operation is {shown!r}, not one of CREATE, UPDATE, DELETE, CONNECT"
        )
    objects: dict[str, dict[str, Any] | None] = {}
    for key in ("object", "oldObject"):
        value = request.get(key)
        if value is not None and not isinstance(value, dict):
            raise MalformedAdmissionReview(
                f"request.{key} is a JSON {type(value).__name__}, not an object"
            )
        objects[key] = value
    texts: dict[str, str] = {}
    for key in ("name", "namespace"):
        value = request.get(key, "")
        if not isinstance(value, str):
            raise MalformedAdmissionReview(f"request.{key} is not a string")
        texts[key] = value
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise MalformedAdmissionReview("request.dryRun is not a boolean")
    user_info = request.get("userInfo")
    user = user_info.get("username", "") if isinstance(user_info, dict) else ""
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        object=objects["object"],
        old_object=objects["oldObject"],
        name=texts["name"],
        namespace=texts["namespace"],
        dry_run=dry_run,
        user=user if isinstance(user, str) else "",
    )


class AdmissionWebhook:
    """The handler of one validator or defaulter; see the module docstring.

    Expected flow:
        ``AdmissionWebhook(TenantValidator())`` (the webhook server's ``add_admission``
        does it and registers the handler on :attr:`spec`'s path); the server calls the
        instance with each request.

    Guarantees:
        Nothing a request carries makes the handler raise or hang beyond what user code
        does: bad input is a 400 or a denial. The object handed to user code is a fresh
        typed instance per request; a defaulter's patch only touches what it changed, so
        fields the typed model drops or reformats are never rewritten.

    Caveats:
        User code runs on the event loop: a slow or blocking validator delays every other
        request (and the API server gives up after ``timeout_seconds``). Make I/O async.

    Errors:
        MalformedAdmissionReview: only from :func:`parse_admission_review`; the handler
            answers it with HTTP 400 and raises nothing itself (the module docstring says
            what each failure answers).

    """

    def __init__(
        self,
        webhook: CustomValidator[Any] | CustomDefaulter[Any],
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.spec: AdmissionWebhookSpec = admission_spec_of(webhook)
        """The webhook's resolved declaration: path, name, operations, resource."""
        self._impl = webhook
        self._metrics = metrics

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        """Answer one HTTP request (the server routes ``spec.path`` here)."""
        try:
            parsed = parse_admission_review(request.body)
        except MalformedAdmissionReview as exc:
            return HttpResponse.text(400, f"malformed AdmissionReview: {exc}\n")
        response = await self.review(parsed)
        body = orjson.dumps(
            {
                "apiVersion": ADMISSION_REVIEW_API_VERSION,
                "kind": "AdmissionReview",
                "response": response,
            }
        )
        return HttpResponse(200, body, content_type=_JSON)

    async def review(self, request: AdmissionRequest) -> dict[str, Any]:
        """The ``response`` of the AdmissionReview answering ``request``."""
        if request.operation not in self.spec.operations:
            return _allowed(request.uid)
        try:
            if self.spec.mutating:
                return await self._default(request)
            return await self._validate(request)
        except Denied as exc:
            return _denied(request.uid, exc.code, exc.message, exc.warnings)
        except _BadObject as exc:
            return _denied(request.uid, 400, str(exc), ())
        except ValueError as exc:
            return _denied(request.uid, 403, str(exc) or type(exc).__name__, ())
        except Exception as exc:
            return self._panic(request, exc)

    # -- validating -----------------------------------------------------------------------

    async def _validate(self, request: AdmissionRequest) -> dict[str, Any]:
        validator = cast("CustomValidator[Any]", self._impl)
        if request.operation == "CREATE":
            method = "validate_create"
            result = validator.validate_create(self._decode(request.object, "object", request))
        elif request.operation == "UPDATE":
            method = "validate_update"
            old = self._decode(request.old_object, "oldObject", request)
            new = self._decode(request.object, "object", request)
            result = validator.validate_update(old, new)
        else:
            method = "validate_delete"
            result = validator.validate_delete(
                self._decode(request.old_object, "oldObject", request)
            )
        if inspect.isawaitable(result):
            result = await result
        return _allowed(request.uid, warnings=self._warnings(result, method))

    def _warnings(self, result: object, method: str) -> Sequence[str]:
        if result is None:
            return ()
        if isinstance(result, str):
            return (result,)
        if isinstance(result, Sequence) and all(isinstance(w, str) for w in result):
            return tuple(result)
        raise TypeError(
            f"{self.spec.cls.__qualname__}.{method} returned {type(result).__name__}, not a list "
            "of warning strings or None"
        )

    # -- mutating -------------------------------------------------------------------------

    async def _default(self, request: AdmissionRequest) -> dict[str, Any]:
        defaulter = cast("CustomDefaulter[Any]", self._impl)
        raw = request.object
        obj = self._decode(raw, "object", request)
        assert raw is not None  # _decode refused a missing object
        before = obj.to_object()
        # Typed as returning None, but a defaulter may hand back a new object (or be async).
        returned: object = cast("Any", defaulter).default(obj)
        if inspect.isawaitable(returned):
            returned = await returned
        if isinstance(returned, self.spec.resource):
            obj = returned
        elif returned is not None:
            raise TypeError(
                f"{self.spec.cls.__qualname__}.default returned {type(returned).__name__}; it "
                "changes obj in place and returns None"
            )
        after = obj.to_object()
        target = _carry(raw, before, after)
        operations = json_patch_diff(raw, target, guard_values=False)
        if not operations:
            return _allowed(request.uid)
        patch = base64.b64encode(orjson.dumps(operations)).decode()
        return _allowed(request.uid, patch=patch)

    # -- shared ---------------------------------------------------------------------------

    def _decode(
        self, raw: dict[str, Any] | None, field: str, request: AdmissionRequest
    ) -> Resource:
        resource = self.spec.resource
        where = _describe(request, raw)
        if raw is None:
            raise _BadObject(
                f"the {request.operation} review of {where} carries no {field}; the "
                f"{self.spec.name} webhook needs it"
            )
        try:
            return resource.from_object(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()[:_MAX_ERRORS]
            )
            more = exc.error_count() - _MAX_ERRORS
            extra = f" (and {more} more)" if more > 0 else ""
            raise _BadObject(
                f"{field} {where} is not a valid {self.spec.kind_label}: {problems}{extra}"
            ) from None

    def _panic(self, request: AdmissionRequest, exc: Exception) -> dict[str, Any]:
        if self._metrics is not None:
            self._metrics.webhook_panics_total.inc()
        log.error(
            "admission webhook %s failed on %s of %s",
            self.spec.name,
            request.operation,
            _describe(request, request.object or request.old_object),
            exc_info=exc,
        )
        return _denied(
            request.uid,
            500,
            f"the {self.spec.name} webhook failed: {type(exc).__name__}: {exc}; see the "
            "operator's log",
            (),
        )


class _BadObject(Exception):
    """An object in the review does not parse as the webhook's resource class."""


def _describe(request: AdmissionRequest, obj: Mapping[str, Any] | None) -> str:
    name = request.name
    if not name and isinstance(obj, Mapping):
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            value = meta.get("name") or meta.get("generateName") or ""
            name = value if isinstance(value, str) else ""
    name = name or "(unnamed)"
    return f"{request.namespace}/{name}" if request.namespace else name


def _allowed(uid: str, *, warnings: Sequence[str] = (), patch: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if warnings:
        response["warnings"] = list(warnings)
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = patch
    return response


def _denied(uid: str, code: int, message: str, warnings: Sequence[str]) -> dict[str, Any]:
    reason = {400: "BadRequest", 403: "Forbidden", 422: "Invalid", 500: "InternalError"}
    response: dict[str, Any] = {
        "uid": uid,
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": code,
            "reason": reason.get(code, ""),
            "message": message,
        },
    }
    if warnings:
        response["warnings"] = list(warnings)
    return response


def _carry(raw: Any, before: Any, after: Any) -> Any:
    """``raw`` with the changes from ``before`` to ``after`` applied, and nothing else.

    ``before`` and ``after`` are the typed object serialized before and after ``default``;
    ``raw`` is what the API server sent. Objects are merged key by key, so a field the
    typed model would drop or reformat is left as sent; a changed list or scalar is taken
    whole from ``after``.
    """
    if json_equal(before, after):
        return raw
    if isinstance(raw, dict) and isinstance(before, dict) and isinstance(after, dict):
        out = dict(raw)
        for key in [*before, *(k for k in after if k not in before)]:
            if key not in after:
                out.pop(key, None)
            elif key not in before or key not in raw:
                out[key] = after[key]
            else:
                out[key] = _carry(raw[key], before[key], after[key])
        return out
    return after
