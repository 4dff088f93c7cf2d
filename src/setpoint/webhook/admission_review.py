"""Admission webhooks: ``admission.k8s.io/v1`` AdmissionReviews, answered by declared classes.

The API server sends an AdmissionReview for every create, update or delete a webhook
configuration matches, and waits for ``allowed`` (validating) or a JSON patch (mutating)
before it stores anything. :class:`AdmissionWebhook` answers them for one
:class:`~setpoint.api.admission.CustomValidator` or
:class:`~setpoint.api.admission.CustomDefaulter` instance, which the webhook server
registers on the declared path (``server.add_admission(TenantValidator())``). The kind may
be any: a typed class (user code gets fresh instances, decoded per request) or a
GroupVersionKind (user code gets the JSON objects; a defaulter gets its own copy to change,
or returns a new dict).

What each input gets (:meth:`AdmissionWebhook.review`):

- a well-formed review the webhook allows: ``allowed: true``, the validator's warnings,
  and for a defaulter the ``JSONPatch`` (base64) from the object as sent to the object as
  ``default`` left it, touching only what ``default`` changed;
- a request the validator refuses (:class:`~setpoint.api.admission.Denied` or
  ``ValueError``): ``allowed: false`` with the validator's message, code 403 (or the one
  ``Denied`` gives), and warnings;
- an object that does not parse as the typed class: ``allowed: false``, code 400, naming
  the object and the first problems;
- any other exception in user code: ``allowed: false``, code 500, a message naming the
  webhook and the exception, a log line with the traceback, and one more
  ``controller_runtime_webhook_panics_total``; the server stays up;
- a body that is not an AdmissionReview (not JSON, another apiVersion or kind, no
  ``request``, no ``uid``, an unknown operation, objects that are not JSON objects): HTTP
  400 with a message saying what is wrong;
- a body of more JSON values than ``max_review_values``, or whose ``object`` or
  ``oldObject`` is larger than ``max_object_size``: HTTP 413 naming it and the option.

A review larger than ``inline_body_size`` is split (:func:`split_admission_review`): its
``object`` and ``oldObject`` are decoded separately, each in its own call, in a review
worker. Every answer echoes the request's ``uid``.
"""

from __future__ import annotations

import base64
import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec
import orjson
from pydantic import ValidationError

from setpoint.api.admission import (
    AdmissionWebhookSpec,
    CustomDefaulter,
    CustomValidator,
    Denied,
    admission_spec_of,
)
from setpoint.api.errors import SetpointError
from setpoint.api.jsonvalues import copy_json, json_equal
from setpoint.client.patch import json_patch_diff
from setpoint.server.http import HttpRequest, HttpResponse
from setpoint.webhook.options import INLINE_BODY_SIZE, MAX_OBJECT_SIZE, MAX_REVIEW_VALUES
from setpoint.webhook.reviews import (
    ABSENT,
    NotJSON,
    ReviewTooLarge,
    ReviewWorkers,
    TooDeepToSplit,
    WrongType,
    check_review_values,
    json_type,
    load_part,
    split_part,
    split_review,
)

if TYPE_CHECKING:
    from setpoint.observability.metrics import Metrics

__all__ = [
    "ADMISSION_REVIEW_API_VERSION",
    "AdmissionRequest",
    "AdmissionWebhook",
    "MalformedAdmissionReview",
    "parse_admission_review",
    "split_admission_review",
]

log = logging.getLogger("setpoint.webhook.admission_review")

ADMISSION_REVIEW_API_VERSION: Final = "admission.k8s.io/v1"
"""The only AdmissionReview version served (generated configurations say
``admissionReviewVersions: [v1]``)."""

_JSON: Final = "application/json"
_OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
_MAX_ERRORS: Final = 3


class MalformedAdmissionReview(SetpointError, ValueError):
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


class _RequestParts(
    msgspec.Struct,
    gc=False,
    rename={"old_object": "oldObject", "dry_run": "dryRun", "user_info": "userInfo"},
):
    """The fields of an AdmissionReview's ``request`` a webhook reads, each undecoded."""

    uid: msgspec.Raw = ABSENT
    operation: msgspec.Raw = ABSENT
    object: msgspec.Raw = ABSENT
    old_object: msgspec.Raw = ABSENT
    name: msgspec.Raw = ABSENT
    namespace: msgspec.Raw = ABSENT
    dry_run: msgspec.Raw = ABSENT
    user_info: msgspec.Raw = ABSENT


_FIELDS: Final = {
    "uid": "uid",
    "operation": "operation",
    "object": "object",
    "oldObject": "old_object",
    "name": "name",
    "namespace": "namespace",
    "dryRun": "dry_run",
    "userInfo": "user_info",
}
"""A request field's JSON name -> its attribute in :class:`_RequestParts`."""


def parse_admission_review(body: bytes) -> AdmissionRequest:
    """Parse and check an AdmissionReview body, decoded whole (the inline path).

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
    _check_kind(review.get("apiVersion"), review.get("kind"))
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedAdmissionReview("request is missing or not an object")
    return _request_of(request)


def split_admission_review(
    body: bytes, *, max_object_size: int = MAX_OBJECT_SIZE, path: str = "the webhook"
) -> AdmissionRequest:
    """:func:`parse_admission_review` for a large body: split, each field decoded alone.

    Expected flow:
        In a review worker, for a body larger than ``inline_body_size``, after
        :func:`~setpoint.webhook.reviews.check_review_values`.

    Guarantees:
        The same result, and the same checks in the same order with the same messages, as
        :func:`parse_admission_review`, except the wording of a JSON syntax error. msgspec
        splits the body and ``request`` without building values; then each field is decoded
        in its own call when the checks reach it, ``object`` and ``oldObject`` separately,
        each at most ``max_object_size`` bytes (fields no check reads are decoded alone
        first, to be refused as decoding the whole body would refuse them). Nesting gets
        orjson's verdict on every Python: deeper than
        :data:`~setpoint.webhook.reviews.MAX_DEPTH` (1,024 levels) is malformed before any
        other check; a body within it that msgspec cannot split (Python 3.11, about 1,000
        levels) is parsed whole by :func:`parse_admission_review`, in one decode.

    Errors:
        MalformedAdmissionReview: as :func:`parse_admission_review`.
        ReviewTooLarge: a field larger than ``max_object_size``, naming it and the option.

    """
    try:
        return _split_admission(body, max_object_size, path)
    except TooDeepToSplit:
        return parse_admission_review(body)


def _split_admission(body: bytes, max_object_size: int, path: str) -> AdmissionRequest:
    """:func:`split_admission_review`, which falls back to the whole body if this cannot."""
    try:
        top = split_review(body, max_size=max_object_size, review="AdmissionReview", path=path)
    except NotJSON as exc:
        raise MalformedAdmissionReview(f"the request body is not JSON ({exc})") from None
    except WrongType as exc:
        raise MalformedAdmissionReview(
            f"the request body is a JSON {exc.python_type}, not an AdmissionReview object"
        ) from None
    load = _Loader(max_object_size, path)
    _check_kind(load(top.api_version, "apiVersion"), load(top.kind, "kind"))
    if json_type(top.request) != "object":
        raise MalformedAdmissionReview("request is missing or not an object")
    try:
        parts = split_part(
            top.request,
            _RequestParts,
            where="request.",
            max_size=max_object_size,
            review="AdmissionReview",
            path=path,
        )
    except NotJSON as exc:
        raise MalformedAdmissionReview(f"the request body is not JSON ({exc})") from None
    return _request_of(_LazyRequest(parts, load))


class _Loader:
    """Decodes one part of an AdmissionReview (at most ``limit`` bytes), naming it."""

    def __init__(self, limit: int, path: str) -> None:
        self.limit = limit
        self.path = path

    def __call__(self, part: msgspec.Raw, field: str) -> Any:
        try:
            return load_part(
                part, self.limit, field=field, review="AdmissionReview", path=self.path
            )
        except NotJSON as exc:
            raise MalformedAdmissionReview(f"the request body is not JSON ({exc})") from None


class _LazyRequest:
    """A split ``request`` read like a dict: each field decoded when first asked for.

    So the checks meet the fields in the same order as on a decoded body.
    """

    def __init__(self, parts: _RequestParts, load: _Loader) -> None:
        self._parts = parts
        self._load = load

    def get(self, key: str, default: Any = None) -> Any:
        """The field decoded, or ``default`` when the body does not hold it."""
        part: msgspec.Raw = getattr(self._parts, _FIELDS[key])
        if not len(part):
            return default
        return self._load(part, f"request.{key}")


def _check_kind(api_version: object, kind: object) -> None:
    if kind != "AdmissionReview":
        raise MalformedAdmissionReview(f"kind is {kind!r}, not 'AdmissionReview'")
    if api_version != ADMISSION_REVIEW_API_VERSION:
        raise MalformedAdmissionReview(
            f"apiVersion {api_version!r} is not served; this webhook answers "
            f"{ADMISSION_REVIEW_API_VERSION} (set admissionReviewVersions: [v1])"
        )


def _request_of(request: dict[str, Any] | _LazyRequest) -> AdmissionRequest:
    """The checked request, from a decoded ``request`` or a split one."""
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
        A review whose body is larger than ``inline_body_size`` is split and decoded field
        by field (``object`` and ``oldObject`` each in its own call, at most
        ``max_object_size`` bytes), checked, turned into typed objects (pydantic
        validation, including a model's own validators: one call per object), and its
        patch and answer encoded, in one of ``workers``' threads; user code still runs on
        the loop in between. Smaller ones are handled on the loop.

    Errors:
        ValueError: from the constructor, for a validator declared as CEL ``validations``
            (a ValidatingAdmissionPolicy: nothing to serve).
        MalformedAdmissionReview: only from :func:`parse_admission_review`; the handler
            answers it with HTTP 400 and raises nothing itself (the module docstring says
            what each failure answers). A body of more JSON values than
            ``max_review_values`` is answered with 413 before it is decoded; so is one whose
            ``object`` or ``oldObject`` is larger than ``max_object_size``.

    """

    def __init__(
        self,
        webhook: CustomValidator[Any] | CustomDefaulter[Any],
        *,
        metrics: Metrics | None = None,
        inline_body_size: int = INLINE_BODY_SIZE,
        max_review_values: int = MAX_REVIEW_VALUES,
        max_object_size: int = MAX_OBJECT_SIZE,
        workers: ReviewWorkers | None = None,
    ) -> None:
        self.spec: AdmissionWebhookSpec = admission_spec_of(webhook)
        """The webhook's resolved declaration: path, name, operations, resource."""
        if self.spec.policy:
            raise ValueError(
                f"{self.spec.cls.__qualname__} declares CEL validations: it is a "
                "ValidatingAdmissionPolicy the API server evaluates, with no webhook to serve; "
                "apply the policies.yaml that `setpoint generate webhook` writes instead"
            )
        self._impl = webhook
        self._metrics = metrics
        self._inline_body = inline_body_size
        self._max_values = max_review_values
        self._max_size = max_object_size
        self._workers = workers if workers is not None else ReviewWorkers(1)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        """Answer one HTTP request (the server routes ``spec.path`` here)."""
        body = request.body
        large = len(body) > self._inline_body
        prepared = await self._workers.run(self._prepare, body) if large else self._prepare(body)
        if isinstance(prepared, HttpResponse):
            return prepared
        response = await self._review(prepared, large=large)
        answer = await self._workers.run(_encode, response) if large else _encode(response)
        return HttpResponse(200, answer, content_type=_JSON)

    async def review(self, request: AdmissionRequest) -> dict[str, Any]:
        """The ``response`` of the AdmissionReview answering ``request``."""
        return await self._review(self._typed(request), large=False)

    def _prepare(self, body: bytes) -> _Typed | HttpResponse:
        """The CPU-bound first half of an answer: check, parse, decode the typed objects.

        A body larger than the inline size is split (:func:`split_admission_review`).
        """
        try:
            path = self.spec.path
            check_review_values(body, self._max_values, review="AdmissionReview", path=path)
            if len(body) > self._inline_body:
                parsed = split_admission_review(body, max_object_size=self._max_size, path=path)
            else:
                parsed = parse_admission_review(body)
        except ReviewTooLarge as exc:
            log.warning("refused an AdmissionReview too large to decode: %s", exc)
            return HttpResponse.text(413, f"{exc}\n")
        except MalformedAdmissionReview as exc:
            return HttpResponse.text(400, f"malformed AdmissionReview: {exc}\n")
        return self._typed(parsed)

    def _typed(self, request: AdmissionRequest) -> _Typed:
        """``request`` with the objects user code will get decoded (or why they cannot be)."""
        typed = _Typed(request)
        if request.operation not in self.spec.operations:
            return typed
        if self.spec.mutating:
            fields: tuple[str, ...] = ("object",)
        elif request.operation == "CREATE":
            fields = ("object",)
        elif request.operation == "UPDATE":
            fields = ("oldObject", "object")
        else:
            fields = ("oldObject",)
        for name in fields:
            raw = request.object if name == "object" else request.old_object
            try:
                obj = self._decode(raw, name, request)
                if self.spec.mutating and self.spec.typed is not None:
                    typed.before = obj.to_object()
            except Exception as exc:  # answered when user code would get the object
                typed.objects[name] = exc
                break  # the first object that does not decode is the answer
            typed.objects[name] = obj
        return typed

    async def _review(self, typed: _Typed, *, large: bool) -> dict[str, Any]:
        request = typed.request
        if request.operation not in self.spec.operations:
            return _allowed(request.uid)
        try:
            if self.spec.mutating:
                return await self._default(typed, large=large)
            return await self._validate(typed)
        except Denied as exc:
            return _denied(request.uid, exc.code, exc.message, exc.warnings)
        except _BadObject as exc:
            return _denied(request.uid, 400, str(exc), ())
        except ValueError as exc:
            return _denied(request.uid, 403, str(exc) or type(exc).__name__, ())
        except Exception as exc:
            return self._panic(request, exc)

    # -- validating -----------------------------------------------------------------------

    async def _validate(self, typed: _Typed) -> dict[str, Any]:
        validator = cast("CustomValidator[Any]", self._impl)
        request = typed.request
        if request.operation == "CREATE":
            method = "validate_create"
            result = validator.validate_create(typed.get("object"))
        elif request.operation == "UPDATE":
            method = "validate_update"
            old = typed.get("oldObject")
            result = validator.validate_update(old, typed.get("object"))
        else:
            method = "validate_delete"
            result = validator.validate_delete(typed.get("oldObject"))
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

    async def _default(self, typed: _Typed, *, large: bool) -> dict[str, Any]:
        defaulter = cast("CustomDefaulter[Any]", self._impl)
        request = typed.request
        obj = typed.get("object")
        raw = request.object
        assert raw is not None  # _decode refused a missing object
        # Typed as returning None, but a defaulter may hand back a new object (or be async).
        returned: object = cast("Any", defaulter).default(obj)
        if inspect.isawaitable(returned):
            returned = await returned
        if isinstance(returned, self.spec.typed or dict):
            obj = returned
        elif returned is not None:
            raise TypeError(
                f"{self.spec.cls.__qualname__}.default returned {type(returned).__name__}; it "
                "changes obj in place and returns None"
            )
        if large:
            patch = await self._workers.run(_patch, raw, typed.before, obj)
        else:
            patch = _patch(raw, typed.before, obj)
        return _allowed(request.uid, patch=patch)

    # -- shared ---------------------------------------------------------------------------

    def _decode(self, raw: dict[str, Any] | None, field: str, request: AdmissionRequest) -> Any:
        """The object user code gets: a typed instance, or for a GVK the JSON object.

        A defaulter of JSON objects gets its own copy, which it may change.
        """
        typed = self.spec.typed
        where = _describe(request, raw)
        if raw is None:
            raise _BadObject(
                f"the {request.operation} review of {where} carries no {field}; the "
                f"{self.spec.name} webhook needs it"
            )
        if typed is None:
            return copy_json(raw) if self.spec.mutating else raw
        try:
            return typed.from_object(raw)
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


@dataclass(slots=True)
class _Typed:
    """A parsed review with the objects user code gets, decoded (on the loop or a worker)."""

    request: AdmissionRequest
    objects: dict[str, Any] = field(default_factory=dict)
    """``"object"``/``"oldObject"`` -> what user code gets (a typed object or a JSON object),
    or the error decoding it raised."""
    before: Any = None
    """A typed defaulter's object serialized before ``default`` ran (mutating webhooks
    only; ``None`` for JSON objects, whose ``raw`` is what they were)."""

    def get(self, name: str) -> Any:
        """The typed object ``name``; raises what decoding it raised."""
        value = self.objects[name]
        if isinstance(value, Exception):
            raise value
        return value


def _patch(raw: dict[str, Any], before: Any, obj: Any) -> str | None:
    """The base64 JSONPatch from ``raw`` to what ``default`` made of it, or ``None``.

    ``obj`` is a typed object (only the changes from ``before`` to it are carried onto
    ``raw``) or a JSON object (a changed copy of ``raw``: the patch is the whole difference).
    """
    target = obj if isinstance(obj, dict) else _carry(raw, before, obj.to_object())
    operations = json_patch_diff(raw, target, guard_values=False)
    if not operations:
        return None
    return base64.b64encode(orjson.dumps(operations)).decode()


def _encode(response: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": ADMISSION_REVIEW_API_VERSION,
            "kind": "AdmissionReview",
            "response": response,
        }
    )


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
