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
- a body holding more JSON values than ``max_review_values`` (counted before decoding), more
  than ``max_review_objects`` objects, or an object larger than ``max_object_size``: HTTP 413
  naming the path (or the object's index), the count or size, and the option.

A review whose body is larger than ``inline_body_size`` is answered in a review worker thread
(:class:`~setpoint.webhook.reviews.ReviewWorkers`), split rather than decoded whole: msgspec
scans the envelope and the ``objects`` list into undecoded parts, then each object is decoded,
converted and encoded on its own into one buffer, so no single call
holding the interpreter lock spans more than one object and the event loop keeps serving.
Smaller reviews are decoded whole and answered on the loop, the fast path. Both paths give the
same answer, byte for byte, to the same body (tests/unit/webhook/test_split_reviews.py).

The conversion itself is :class:`setpoint.api.conversion.KindConversion`, the same code the
fake client and the unit tests use.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec
import orjson

from setpoint.api.conversion import CONVERT_PATH, ConversionError, KindConversion
from setpoint.api.errors import SetpointError
from setpoint.server.http import HttpRequest, HttpResponse
from setpoint.webhook.options import (
    INLINE_BODY_SIZE,
    MAX_OBJECT_SIZE,
    MAX_REVIEW_OBJECTS,
    MAX_REVIEW_VALUES,
)
from setpoint.webhook.reviews import (
    ABSENT,
    NotJSON,
    ReviewTooLarge,
    ReviewWorkers,
    TooDeepToSplit,
    WrongType,
    check_object_count,
    check_review_values,
    json_type,
    load_part,
    split_objects,
    split_part,
    split_review,
)

if TYPE_CHECKING:
    from setpoint.api.resource import Resource
    from setpoint.observability.metrics import Metrics

__all__ = ["CONVERT_PATH", "REVIEW_API_VERSION", "ConversionWebhook", "MalformedConversionReview"]

log = logging.getLogger("setpoint.webhook.conversion_review")

REVIEW_API_VERSION: Final = "apiextensions.k8s.io/v1"
"""The only ConversionReview version served (the CRDs say ``conversionReviewVersions: [v1]``)."""

JSON: Final = "application/json"
_REVIEW: Final = "ConversionReview"
_SUCCESS_HEAD: Final = (
    b'{"apiVersion":"' + REVIEW_API_VERSION.encode() + b'","kind":"ConversionReview",'
    b'"response":{"uid":'
)
"""The bytes of a successful answer before its uid; then ``,"convertedObjects":[``, the
objects, and :data:`_SUCCESS_TAIL` (what ``orjson.dumps`` of the whole answer writes)."""
_SUCCESS_TAIL: Final = b'],"result":{"status":"Success"}}}'


class _RequestParts(msgspec.Struct, gc=False, rename={"desired_api_version": "desiredAPIVersion"}):
    """A ConversionReview's ``request``, each field undecoded (or ``ABSENT``)."""

    uid: msgspec.Raw = ABSENT
    desired_api_version: msgspec.Raw = ABSENT
    objects: msgspec.Raw = ABSENT


class MalformedConversionReview(SetpointError, ValueError):
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
        therefore run in a worker thread or on the loop, and must not rely on either. A body
        larger than ``inline_body_size`` is split and decoded one object at a time; one
        object's decode (up to ``max_object_size``) is the longest the loop can wait. Keep
        ``inline_body_size`` at most ``max_object_size`` (WebhookServerOptions checks it):
        a body decoded whole is not split, so its objects are not measured.

    Errors:
        MalformedConversionReview: from :meth:`parse` (the handler turns it into HTTP 400).

    """

    def __init__(
        self,
        *,
        metrics: Metrics | None = None,
        inline_objects: int = 16,
        inline_body_size: int = INLINE_BODY_SIZE,
        max_review_values: int = MAX_REVIEW_VALUES,
        max_review_objects: int = MAX_REVIEW_OBJECTS,
        max_object_size: int = MAX_OBJECT_SIZE,
        workers: ReviewWorkers | None = None,
    ) -> None:
        self._kinds: dict[tuple[str, str], KindConversion] = {}
        self._metrics = metrics
        self._inline = inline_objects
        self._inline_body = inline_body_size
        self._max_values = max_review_values
        self._max_objects = max_review_objects
        self._max_size = max_object_size
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
            except (MalformedConversionReview, ReviewTooLarge) as exc:
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

        The handler's review workers call it, and so do benchmarks and tests. A body larger
        than ``inline_body_size`` is split and decoded one object at a time
        (``_review_split``); a smaller one is decoded whole. Both answer alike.
        """
        if len(body) > self._inline_body:
            return self._review_split(body)
        return self._review_whole(body)

    def _review_whole(self, body: bytes) -> tuple[int, bytes]:
        """:meth:`review` for a body decoded whole."""
        try:
            review = self._checked(body)
        except (MalformedConversionReview, ReviewTooLarge) as exc:
            return _refusal(exc)
        return 200, self.respond(review)

    def _checked(self, body: bytes) -> dict[str, Any]:
        check_review_values(body, self._max_values, review=_REVIEW, path=CONVERT_PATH)
        review = self.parse(body)
        count = len(review["request"]["objects"])
        check_object_count(count, self._max_objects, review=_REVIEW, path=CONVERT_PATH)
        return review

    @staticmethod
    def parse(body: bytes) -> dict[str, Any]:
        """The ConversionReview in ``body``, decoded whole and checked (the inline path).

        Checked for the fields the answer needs; large reviews are split instead.

        Raises:
            MalformedConversionReview: naming the first thing that is wrong.

        """
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise MalformedConversionReview(f"the body is not JSON ({exc})") from None
        if not isinstance(review, dict):
            raise MalformedConversionReview(
                f"the body is a JSON {_json_type(review)}, not an object"
            )
        _check_kind(review.get("apiVersion"), review.get("kind"))
        request = review.get("request")
        if not isinstance(request, dict):
            raise MalformedConversionReview(f"request is {_json_type(request)}, expected an object")
        _check_target(request.get("uid"), request.get("desiredAPIVersion"))
        objects = request.get("objects")
        if not isinstance(objects, list):
            raise MalformedConversionReview(
                f"request.objects is {_json_type(objects)}, expected a list"
            )
        for index, obj in enumerate(objects):
            if not isinstance(obj, dict):
                raise MalformedConversionReview(
                    f"request.objects[{index}] is {_json_type(obj)}, expected an object"
                )
        return review

    def _review_split(self, body: bytes) -> tuple[int, bytes]:
        """:meth:`review` for a large body: split, then one object at a time.

        Expected flow:
            Count the values (:func:`check_review_values`), split the envelope and
            ``request`` (msgspec, no values built), decode and check the four strings the
            answer needs, split ``objects`` into one undecoded part per object
            (:func:`split_objects`), then decode, convert and encode each object in turn and
            join the answer once.

        Guarantees:
            The same status and bytes as decoding ``body`` whole, checks in the same order
            with the same messages, except the wording of a JSON syntax error (msgspec's, or
            orjson's for one object, naming it). No decode call is given more than one
            object (or one of the envelope's strings or other fields), and each at most
            ``max_object_size`` bytes. Nesting gets orjson's verdict on every Python: a body
            nested deeper than :data:`~setpoint.webhook.reviews.MAX_DEPTH` (1,024 levels) is
            refused (400) before any other check but the count of values, as decoding it
            whole refuses it; one within that depth which msgspec cannot split (Python 3.11,
            about 1,000 levels) is answered by decoding it whole (:meth:`_review_whole`),
            which then holds the interpreter for that one decode, as before the split
            (bounded by ``max_review_values``; :class:`~setpoint.webhook.reviews.TooDeepToSplit`).

        Errors:
            None raised: refusals are returned as 400 or 413, like :meth:`review`.

        """
        try:
            check_review_values(body, self._max_values, review=_REVIEW, path=CONVERT_PATH)
            uid, desired, parts = self._split(body)
            return 200, self._answer(uid, desired, self._decoded(parts), len(parts))
        except TooDeepToSplit:
            return self._review_whole(body)
        except (MalformedConversionReview, ReviewTooLarge) as exc:
            return _refusal(exc)

    def _split(self, body: bytes) -> tuple[str, str, list[msgspec.Raw]]:
        """The uid, the desired version and the objects' undecoded parts, all checked."""
        try:
            top = split_review(body, max_size=self._max_size, review=_REVIEW, path=CONVERT_PATH)
        except NotJSON as exc:
            raise MalformedConversionReview(f"the body is not JSON ({exc})") from None
        except WrongType as exc:
            raise MalformedConversionReview(
                f"the body is a JSON {exc.json_type}, not an object"
            ) from None
        _check_kind(self._load(top.api_version, "apiVersion"), self._load(top.kind, "kind"))
        if json_type(top.request) != "object":
            raise MalformedConversionReview(
                f"request is {json_type(top.request)}, expected an object"
            )
        try:
            request = split_part(
                top.request,
                _RequestParts,
                where="request.",
                max_size=self._max_size,
                review=_REVIEW,
                path=CONVERT_PATH,
            )
        except NotJSON as exc:
            raise MalformedConversionReview(f"the body is not JSON ({exc})") from None
        uid = self._load(request.uid, "request.uid")
        desired = self._load(request.desired_api_version, "request.desiredAPIVersion")
        _check_target(uid, desired)
        if json_type(request.objects) != "array":
            raise MalformedConversionReview(
                f"request.objects is {json_type(request.objects)}, expected a list"
            )
        try:
            parts = split_objects(
                request.objects,
                max_objects=self._max_objects,
                max_size=self._max_size,
                review=_REVIEW,
                path=CONVERT_PATH,
            )
        except WrongType as exc:
            raise MalformedConversionReview(
                f"{exc.where} is {exc.json_type}, expected an object"
            ) from None
        except NotJSON as exc:
            raise MalformedConversionReview(f"the body is not JSON ({exc})") from None
        return uid, desired, parts

    def _load(self, part: msgspec.Raw, field: str) -> Any:
        try:
            return load_part(part, self._max_size, field=field, review=_REVIEW, path=CONVERT_PATH)
        except NotJSON as exc:
            raise MalformedConversionReview(f"the body is not JSON ({exc})") from None

    def _decoded(self, parts: list[msgspec.Raw]) -> Iterator[Any]:
        """Each object, decoded when the conversion loop reaches it (one at a time)."""
        for index, part in enumerate(parts):
            yield self._load(part, f"request.objects[{index}]")

    def respond(self, review: Mapping[str, Any]) -> bytes:
        """The ConversionReview answering a parsed review, serialized."""
        request = review["request"]
        objects = request["objects"]
        return self._answer(request["uid"], request["desiredAPIVersion"], objects, len(objects))

    def _answer(self, uid: str, desired: str, objects: Iterable[Any], count: int) -> bytes:
        """Convert ``objects`` (``count`` of them) in order; the answer, serialized.

        Each converted object is encoded as soon as it is converted and appended to one
        buffer, copied to ``bytes`` once at the end, so at most one object is held decoded;
        the bytes are those ``orjson.dumps`` gives for the whole answer. (Not a list of the
        encoded objects joined at the end: each ``orjson.dumps`` result keeps a buffer of
        several KiB whatever its length, 4-8x a typical object.) After the first failure the
        others are still converted (the message counts them) but no longer encoded.
        """
        out = bytearray(_SUCCESS_HEAD)
        out += orjson.dumps(uid)
        out += b',"convertedObjects":['
        failed = 0
        first = ""
        for obj in objects:
            try:
                converted = self._convert(obj, desired)
            except ConversionError as exc:
                failed += 1
                first = first or str(exc)
                if exc.in_user_code:
                    self._count_panic(exc)
                continue
            except Exception as exc:
                # A bug here or in pydantic, not a bad object: still never a crash.
                log.exception("unexpected error converting an object to %s", desired)
                failed += 1
                first = first or (
                    f"internal error converting an object to {desired}: {type(exc).__name__}: {exc}"
                )
                self._count_panic(exc)
                continue
            if not failed:
                out += orjson.dumps(converted)
                out += b","
        if failed:
            message = first
            if failed > 1:
                message += f" (and {failed - 1} more of {count} objects)"
            log.warning("conversion to %s failed: %s", desired, message)
            response = {"uid": uid, "result": {"status": "Failure", "message": message}}
            return orjson.dumps(
                {"apiVersion": REVIEW_API_VERSION, "kind": _REVIEW, "response": response}
            )
        if count:
            del out[-1]  # the last comma
        out += _SUCCESS_TAIL
        return bytes(out)

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


def _refusal(exc: MalformedConversionReview | ReviewTooLarge) -> tuple[int, bytes]:
    """The status and text answering a review refused before conversion (logged)."""
    if isinstance(exc, ReviewTooLarge):
        log.warning("refused a ConversionReview too large to decode: %s", exc)
        return 413, f"{exc}\n".encode()
    log.warning("refused a malformed ConversionReview: %s", exc)
    return 400, f"malformed ConversionReview: {exc}\n".encode()


def _check_kind(api_version: object, kind: object) -> None:
    if api_version != REVIEW_API_VERSION or kind != _REVIEW:
        raise MalformedConversionReview(
            f"expected apiVersion {REVIEW_API_VERSION} kind ConversionReview, got "
            f"apiVersion={api_version!r} kind={kind!r} (the CRD must list "
            "conversionReviewVersions: [v1])"
        )


def _check_target(uid: object, desired: object) -> None:
    if not isinstance(uid, str) or not uid:
        raise MalformedConversionReview(f"request.uid is {uid!r}, expected a non-empty string")
    if not isinstance(desired, str) or not desired:
        raise MalformedConversionReview(
            f"request.desiredAPIVersion is {desired!r}, expected a group/version string"
        )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )
