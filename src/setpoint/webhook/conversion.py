"""``/convert``: the CRD conversion webhook, for ``apiextensions.k8s.io/v1`` ConversionReviews.

The API server sends a ConversionReview whenever it needs objects of a kind at a version other
than the one they are stored in: a read or watch at another version, a write at another
version, a list of thousands at once. The request names a ``desiredAPIVersion`` and carries
``objects``; the answer echoes the request's ``uid`` and returns ``convertedObjects`` in the
same order, or a ``Failure`` for the whole review.

What each input gets (see :meth:`ConversionWebhook.review`):

- a well-formed review whose objects all convert: ``result.status: Success``;
- an object that cannot be converted (unknown version or kind, schema mismatch, a converter
  that raised or changed forbidden metadata): ``result.status: Failure`` with a message
  naming the object, its version, the target version and the reason (the API server puts it
  in the error the user sees);
- a body that is not a ConversionReview (not JSON, wrong apiVersion/kind, no request, no uid,
  objects not a list of objects): HTTP 400 with a message saying what is wrong;
- an exception in a converter: a ``Failure`` like any other object failure, counted in
  ``controller_runtime_conversion_webhook_panics_total``; the server stays up;
- a body holding more JSON values than ``max_review_values`` (counted before decoding): HTTP
  413 naming the path, the count and the option.

A review whose body is larger than ``inline_body_size`` is decoded, converted and encoded in
a review worker thread (:class:`~setpoint.webhook.reviews.ReviewWorkers`), so the event loop
keeps serving while it is; smaller ones are answered on the loop, the fast path.

The conversion itself is :class:`setpoint.api.conversion.KindConversion`, the same code the
fake client and the unit tests use.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from setpoint.api.conversion import CONVERT_PATH, ConversionError, KindConversion
from setpoint.api.errors import SetpointError
from setpoint.server.http import HttpRequest, HttpResponse
from setpoint.webhook.options import INLINE_BODY_SIZE, MAX_REVIEW_VALUES
from setpoint.webhook.reviews import ReviewTooLarge, ReviewWorkers, check_review_values

if TYPE_CHECKING:
    from setpoint.api.resource import Resource
    from setpoint.observability.metrics import Metrics

__all__ = ["CONVERT_PATH", "REVIEW_API_VERSION", "ConversionWebhook", "MalformedReview"]

log = logging.getLogger("setpoint.webhook.conversion")

REVIEW_API_VERSION: Final = "apiextensions.k8s.io/v1"
"""The only ConversionReview version served (the CRDs say ``conversionReviewVersions: [v1]``)."""

JSON: Final = "application/json"


class MalformedReview(SetpointError, ValueError):
    """The request body is not a usable ConversionReview; the message says what is wrong."""


class ConversionWebhook:
    """The ``/convert`` handler: converts ConversionReview batches with registered kinds.

    Expected flow:
        :meth:`register` the version classes of each kind (the webhook server's
        ``add_conversion`` does), then the server calls the instance with each request.

    Guarantees:
        The response echoes ``request.uid`` and lists converted objects in request order.
        One object's failure fails the review (the API server accepts nothing partial), with
        a message naming that object and how many others failed. Nothing a request carries
        makes the handler raise: bad input is a 400 or a Failure.

    Caveats:
        Conversion is CPU work. A body larger than ``inline_body_size``, or one with more
        than ``inline_objects`` objects, is answered in one of ``workers``' threads (the
        webhook server shares one :class:`~setpoint.webhook.reviews.ReviewWorkers` between
        all its handlers; without one the handler makes its own, of one thread). Converters
        therefore run in a worker thread or on the loop, and must not rely on either.

    Errors:
        MalformedReview: from :meth:`parse` (the handler turns it into HTTP 400).

    """

    def __init__(
        self,
        *,
        metrics: Metrics | None = None,
        inline_objects: int = 16,
        inline_body_size: int = INLINE_BODY_SIZE,
        max_review_values: int = MAX_REVIEW_VALUES,
        workers: ReviewWorkers | None = None,
    ) -> None:
        self._kinds: dict[tuple[str, str], KindConversion] = {}
        self._metrics = metrics
        self._inline = inline_objects
        self._inline_body = inline_body_size
        self._max_values = max_review_values
        self._workers = workers if workers is not None else ReviewWorkers(1)
        if metrics is not None:
            metrics.conversion_webhook_panics_total.inc(0)

    def register(self, *classes: type[Resource]) -> KindConversion:
        """Convert the kind these version classes declare (hub and spokes).

        Raises:
            DeclarationError: not the versions of one kind with one hub.
            ValueError: the kind is registered already.

        """
        conversion = KindConversion.of(*classes)
        key = (conversion.group, conversion.kind)
        if key in self._kinds:
            raise ValueError(
                f"conversion for {conversion.kind}.{conversion.group} is registered already; "
                "register each kind once, with all its version classes"
            )
        self._kinds[key] = conversion
        return conversion

    @property
    def kinds(self) -> tuple[str, ...]:
        """``Kind.group`` of every registered kind, sorted."""
        return tuple(sorted(f"{kind}.{group}" for group, kind in self._kinds))

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        """Answer one HTTP request (the server has checked path and method)."""
        if len(request.body) > self._inline_body:
            status, body = await self._workers.run(self.review, request.body)
        else:
            try:
                review = self._checked(request.body)
            except (MalformedReview, ReviewTooLarge) as exc:
                status, body = _refusal(exc)
            else:
                if len(review["request"]["objects"]) > self._inline:
                    status, body = 200, await self._workers.run(self.respond, review)
                else:
                    status, body = 200, self.respond(review)
        if status != 200:
            return HttpResponse(status, body)
        return HttpResponse(200, body, JSON)

    def review(self, body: bytes) -> tuple[int, bytes]:
        """Status code and body answering ``body``, on the calling thread.

        The handler's review workers call it, and so do benchmarks and tests.
        """
        try:
            review = self._checked(body)
        except (MalformedReview, ReviewTooLarge) as exc:
            return _refusal(exc)
        return 200, self.respond(review)

    def _checked(self, body: bytes) -> dict[str, Any]:
        check_review_values(body, self._max_values, review="ConversionReview", path=CONVERT_PATH)
        return self.parse(body)

    @staticmethod
    def parse(body: bytes) -> dict[str, Any]:
        """The ConversionReview in ``body``, checked for the fields the answer needs.

        Raises:
            MalformedReview: naming the first thing that is wrong.

        """
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise MalformedReview(f"the body is not JSON ({exc})") from None
        if not isinstance(review, dict):
            raise MalformedReview(f"the body is a JSON {_json_type(review)}, not an object")
        api_version, kind = review.get("apiVersion"), review.get("kind")
        if api_version != REVIEW_API_VERSION or kind != "ConversionReview":
            raise MalformedReview(
                f"expected apiVersion {REVIEW_API_VERSION} kind ConversionReview, got "
                f"apiVersion={api_version!r} kind={kind!r} (the CRD must list "
                "conversionReviewVersions: [v1])"
            )
        request = review.get("request")
        if not isinstance(request, dict):
            raise MalformedReview(f"request is {_json_type(request)}, expected an object")
        uid = request.get("uid")
        if not isinstance(uid, str) or not uid:
            raise MalformedReview(f"request.uid is {uid!r}, expected a non-empty string")
        desired = request.get("desiredAPIVersion")
        if not isinstance(desired, str) or not desired:
            raise MalformedReview(
                f"request.desiredAPIVersion is {desired!r}, expected a group/version string"
            )
        objects = request.get("objects")
        if not isinstance(objects, list):
            raise MalformedReview(f"request.objects is {_json_type(objects)}, expected a list")
        for index, obj in enumerate(objects):
            if not isinstance(obj, dict):
                raise MalformedReview(
                    f"request.objects[{index}] is {_json_type(obj)}, expected an object"
                )
        return review

    def respond(self, review: Mapping[str, Any]) -> bytes:
        """The ConversionReview answering a parsed review, serialized."""
        request = review["request"]
        uid, desired = request["uid"], request["desiredAPIVersion"]
        converted: list[dict[str, Any]] = []
        failures: list[str] = []
        for obj in request["objects"]:
            try:
                converted.append(self._convert(obj, desired))
            except ConversionError as exc:
                failures.append(str(exc))
                if exc.in_user_code:
                    self._count_panic(exc)
            except Exception as exc:
                # A bug here or in pydantic, not a bad object: still never a crash.
                log.exception("unexpected error converting an object to %s", desired)
                failures.append(
                    f"internal error converting an object to {desired}: {type(exc).__name__}: {exc}"
                )
                self._count_panic(exc)
        response: dict[str, Any] = {"uid": uid}
        if failures:
            message = failures[0]
            if len(failures) > 1:
                message += f" (and {len(failures) - 1} more of {len(request['objects'])} objects)"
            response["result"] = {"status": "Failure", "message": message}
            log.warning("conversion to %s failed: %s", desired, message)
        else:
            response["convertedObjects"] = converted
            response["result"] = {"status": "Success"}
        return orjson.dumps(
            {"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview", "response": response}
        )

    def _convert(self, obj: dict[str, Any], desired: str) -> dict[str, Any]:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        conversion = self._kinds.get((group, kind)) if isinstance(kind, str) else None
        if conversion is None:
            meta = obj.get("metadata")
            name = meta.get("name", "") if isinstance(meta, dict) else ""
            raise ConversionError(
                f"{kind} {name or '(unnamed)'} ({api_version}) -> {desired}: this webhook has "
                f"no conversion for {kind}.{group} (it converts: "
                f"{', '.join(self.kinds) or 'nothing'}); register the kind's version classes "
                "with the webhook server's add_conversion()",
                object_ref=f"{kind} {name}",
                from_version=str(api_version),
                to_version=desired,
            )
        return conversion.convert(obj, desired)

    def _count_panic(self, exc: BaseException) -> None:
        if self._metrics is not None:
            self._metrics.conversion_webhook_panics_total.inc()
        log.error("a converter failed: %s", exc)


def _refusal(exc: MalformedReview | ReviewTooLarge) -> tuple[int, bytes]:
    """The status and text answering a review refused before conversion (logged)."""
    if isinstance(exc, ReviewTooLarge):
        log.warning("refused a ConversionReview too large to decode: %s", exc)
        return 413, f"{exc}\n".encode()
    log.warning("refused a malformed ConversionReview: %s", exc)
    return 400, f"malformed ConversionReview: {exc}\n".encode()


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )
