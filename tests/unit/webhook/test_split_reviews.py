"""Large reviews are split, then decoded one object at a time (issue 27, finding 2).

A review above the inline size is never handed to one decode call whole: its envelope is
split without building values, and each object (a ConversionReview's ``objects[i]``, an
AdmissionReview's ``object`` and ``oldObject``) is decoded on its own, so no single C call
that holds the interpreter lock spans more than one object. An object larger than
``max_object_size``, or a review of more than ``max_review_objects`` objects, is refused
(413) naming it. The split path answers what the whole-body path answers: same status, same
bytes, same messages (the instrumented tests here and the differential property below).

Structural tests only: which bytes each decode call was given, what was answered.
"""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.observability.metrics import Metrics
from setpoint.server.http import HttpRequest
from setpoint.webhook import AdmissionWebhook, ConversionWebhook, WebhookServerOptions
from setpoint.webhook.reviews import ReviewWorkers, exceeds_depth
from tests._support.machines import V1, V2, VERSIONS, hub_object
from tests._support.vessels import GROUP as VESSEL_GROUP
from tests._support.vessels import VesselDefaulter, VesselValidator

WHOLE = 1 << 40
"""An inline size no body reaches: every review is decoded whole (today's fast path)."""
SPLIT = 0
"""An inline size every body passes: every review is split."""
MARK = re.compile(rb"marker-(\d{4})")
"""Each object in these reviews carries one ``marker-NNNN`` (its name), and only one."""


def conversion_review(objects: list[Any], uid: str = "u-1", desired: str = V1) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
        }
    )


def machines(count: int, **spec: Any) -> list[dict[str, Any]]:
    return [hub_object(name=f"marker-{i:04d}", **spec) for i in range(count)]


def vessel(name: str, capacity: int = 3, note: str = "") -> dict[str, Any]:
    return {
        "apiVersion": f"{VESSEL_GROUP}/v1",
        "kind": "Vessel",
        "metadata": {"name": name, "namespace": "sea", "annotations": {"note": note}},
        "spec": {"capacity": capacity, "crew": ["ann"], "captain": "ann"},
    }


def admission_review(
    operation: str = "UPDATE", obj: Any = None, old: Any = None, **extra: Any
) -> bytes:
    request: dict[str, Any] = {
        "uid": "a-1",
        "operation": operation,
        "name": "v",
        "namespace": "sea",
        "userInfo": {"username": "alice", "groups": ["dev"]},
        **extra,
    }
    if obj is not None:
        request["object"] = obj
    if old is not None:
        request["oldObject"] = old
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


class Recorder:
    """Every input ``orjson.loads`` is given while installed, as bytes."""

    def __init__(self) -> None:
        self.inputs: list[bytes] = []

    def markers(self) -> list[set[bytes]]:
        """The distinct object markers in each input (one set per decode call)."""
        return [set(MARK.findall(data)) for data in self.inputs]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """``orjson.loads`` wrapped: each call's input is recorded, then decoded as before."""
    record = Recorder()
    real = orjson.loads

    def loads(data: Any) -> Any:
        record.inputs.append(data.encode() if isinstance(data, str) else bytes(data))
        return real(data)

    monkeypatch.setattr(orjson, "loads", loads)
    yield record


@pytest.fixture
async def workers() -> AsyncIterator[ReviewWorkers]:
    pool = ReviewWorkers(1)
    yield pool
    pool.close()


def converter(inline: int, **options: Any) -> ConversionWebhook:
    hook = ConversionWebhook(inline_body_size=inline, metrics=Metrics.isolated(), **options)
    hook.register(*VERSIONS)
    return hook


# --------------------------------------------------------------------------- one object per call


def test_no_decode_call_is_given_more_than_one_object_of_a_conversion_review(
    recorder: Recorder,
) -> None:
    """40 objects, above the inline size: each decode call sees at most one object's bytes,
    and every object is decoded (today's code decodes the whole body in one call)."""
    body = conversion_review(machines(40))
    status, answer = converter(1024).review(body)
    assert status == 200, answer
    seen = recorder.markers()
    assert all(len(markers) <= 1 for markers in seen), [sorted(m) for m in seen if len(m) > 1]
    assert set().union(*seen) == {f"{i:04d}".encode() for i in range(40)}
    assert not any(data == body for data in recorder.inputs)
    response = orjson.loads(answer)["response"]
    assert response["result"] == {"status": "Success"}
    names = [o["metadata"]["name"] for o in response["convertedObjects"]]
    assert names == [f"marker-{i:04d}" for i in range(40)]


async def test_an_admission_review_decodes_object_and_old_object_separately(
    recorder: Recorder, workers: ReviewWorkers
) -> None:
    """An UPDATE above the inline size: ``object`` and ``oldObject`` in separate calls."""
    hook = AdmissionWebhook(VesselValidator(), inline_body_size=1024, workers=workers)
    body = admission_review(
        obj=vessel("marker-0001", capacity=4, note="x" * 2000),
        old=vessel("marker-0002", capacity=3, note="y" * 2000),
    )
    response = await hook(HttpRequest("POST", hook.spec.path, body=body))
    assert response.status == 200, response.body
    seen = recorder.markers()
    assert all(len(markers) <= 1 for markers in seen), [sorted(m) for m in seen if len(m) > 1]
    assert {b"0001", b"0002"} <= set().union(*seen)
    answer = orjson.loads(response.body)["response"]
    assert answer["allowed"] is True and answer["uid"] == "a-1"


def test_a_small_review_keeps_the_whole_body_fast_path(recorder: Recorder) -> None:
    """At or below the inline size nothing changes: one decode of the body."""
    body = conversion_review(machines(1))
    status, _ = converter(len(body)).review(body)
    assert status == 200
    assert recorder.inputs[0] == body


def test_a_split_review_holds_about_two_answers_of_memory_at_most() -> None:
    """The answer is built in one buffer: peak traced memory during a 1,000-object review is
    within a few answers' size (today's pieces held one ``orjson.dumps`` buffer of several
    KiB per object until the join, ~8x the answer; decoding whole held the review, ~8x)."""
    body = conversion_review(machines(1000))
    hook = converter(1024)
    hook.review(conversion_review(machines(1)))  # imports and caches, outside the trace
    tracemalloc.start()
    try:
        status, answer = hook.review(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 200
    assert peak < 3 * len(answer) + 512 * 1024, (peak, len(answer))


# --------------------------------------------------------------------------- caps


def test_an_object_over_max_object_size_is_refused_naming_its_index() -> None:
    """413, naming the index, the object's size, the limit and the option; nothing decoded
    beyond the envelope (no conversion ran: the answer is the refusal)."""
    objects = [*machines(2), hub_object(name="big"), *machines(1)]
    objects[2]["metadata"]["annotations"]["note"] = "x" * 6000
    body = conversion_review(objects)
    size = len(orjson.dumps(objects[2]))
    status, answer = converter(1024, max_object_size=4096).review(body)
    assert status == 413, answer
    text = answer.decode()
    assert "request.objects[2]" in text
    assert str(size) in text and "4096" in text
    assert "WebhookServerOptions.max_object_size" in text


async def test_an_admission_object_over_max_object_size_is_refused(
    workers: ReviewWorkers,
) -> None:
    hook = AdmissionWebhook(
        VesselValidator(), inline_body_size=1024, max_object_size=4096, workers=workers
    )
    body = admission_review(obj=vessel("v"), old=vessel("v", note="z" * 5000))
    response = await hook(HttpRequest("POST", hook.spec.path, body=body))
    assert response.status == 413, response.body
    text = response.body.decode()
    assert "request.oldObject" in text and "WebhookServerOptions.max_object_size" in text


def test_a_review_of_more_objects_than_max_review_objects_is_refused() -> None:
    """Counted before the objects are split into parts: 413 naming count and option."""
    body = conversion_review([{}] * 300)
    status, answer = converter(SPLIT, max_review_objects=200).review(body)
    assert status == 413, answer
    text = answer.decode()
    assert "300" in text and "200" in text
    assert "WebhookServerOptions.max_review_objects" in text
    status, answer = converter(WHOLE, max_review_objects=200).review(body)
    assert status == 413, "the whole-body path applies the same cap"


def test_the_new_caps_have_documented_defaults_and_checks() -> None:
    """3 MiB: kube-apiserver's request body limit, twice etcd's 1.5 MiB object limit."""
    options = WebhookServerOptions()
    assert options.max_object_size == 3 * 1024 * 1024
    assert 80_000 <= options.max_review_objects <= 200_000
    assert options.inline_body_size <= options.max_object_size
    with pytest.raises(ValueError, match="max_review_objects=0 must be >= 1"):
        WebhookServerOptions(max_review_objects=0)
    with pytest.raises(ValueError, match="max_object_size=100 is below inline_body_size"):
        WebhookServerOptions(max_object_size=100)


# --------------------------------------------------------------------------- same answers


def both(body: bytes, **options: Any) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    """``body`` answered decoded whole, and split."""
    return converter(WHOLE, **options).review(body), converter(SPLIT, **options).review(body)


def same_answer(whole: tuple[int, bytes], split: tuple[int, bytes]) -> None:
    """Byte for byte; for JSON that does not decode, the same status and kind of message
    (the decoders word their syntax errors differently)."""
    if whole[0] == 400 and b"is not JSON" in whole[1]:
        assert split[0] == 400 and b"is not JSON" in split[1], (whole, split)
        return
    assert split == whole


def test_duplicate_keys_keep_the_last_value_at_every_level() -> None:
    """orjson keeps a repeated key's last value; the split must too (envelope, request,
    and inside objects)."""
    good = orjson.dumps(hub_object(name="marker-0001"))[1:-1]
    body = (
        b'{"kind":"AdmissionReview","apiVersion":"apiextensions.k8s.io/v1",'
        b'"request":{"uid":"first","objects":[],"desiredAPIVersion":"x/v1",'
        b'"uid":"last","desiredAPIVersion":"' + V1.encode() + b'",'
        b'"objects":[{"metadata":{"name":"gone"},' + good + b"}]},"
        b'"kind":"ConversionReview","request":5,'
        b'"request":{"uid":"last","desiredAPIVersion":"' + V1.encode() + b'",'
        b'"objects":[{"kind":"Nope",' + good + b"}]}}"
    )
    whole, split = both(body)
    assert whole[0] == 200, whole
    assert split == whole
    response = orjson.loads(split[1])["response"]
    assert response["uid"] == "last"
    assert response["convertedObjects"][0]["metadata"]["name"] == "marker-0001"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[1, 2]", "the body is a JSON array, not an object"),
        (b'"review"', "the body is a JSON string, not an object"),
        (b"null", "the body is a JSON null, not an object"),
        (b'{"apiVersion": "v1", "kind": "ConversionReview"}', "got apiVersion='v1'"),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}',
            "request is null, expected an object",
        ),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":[]}',
            "request is array, expected an object",
        ),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",'
            b'"request":{"uid":7}}',
            "request.uid is 7, expected a non-empty string",
        ),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",'
            b'"request":{"uid":"u","desiredAPIVersion":"a/v1","objects":{"a":1}}}',
            "request.objects is object, expected a list",
        ),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",'
            b'"request":{"uid":"u","desiredAPIVersion":"a/v1","objects":[{},{},"x",1]}}',
            "request.objects[2] is string, expected an object",
        ),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",'
            b'"request":{"uid":"u","desiredAPIVersion":"a/v1","objects":[{},[],{}]}}',
            "request.objects[1] is array, expected an object",
        ),
        (
            b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview",'
            b'"request":{"uid":"u","desiredAPIVersion":"a/v1","objects":[{},true]}}',
            "request.objects[1] is boolean, expected an object",
        ),
    ],
)
def test_malformed_envelopes_get_the_whole_body_messages(body: bytes, message: str) -> None:
    whole, split = both(body)
    assert whole[0] == 400 and message in whole[1].decode(), whole
    assert split == whole


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b'{"apiVersion":"apiextensions.k8s.io/v1",',
        b'{"a":1} trailing',
        b'{"a":01}',
        b'{"a":NaN}',
        b"\xef\xbb\xbf{}",
        b'{"a":"\x01"}',
        b"[" * 5000 + b"]" * 5000,
        b'{"request":' + b"[" * 5000 + b"]" * 5000 + b"}",
        conversion_review([{"a": "ok"}])[:-3],
        conversion_review([{}])[:-1] + b"x",
        conversion_review([{}, {}]).replace(b"{},{}", b'{},{"a":1e400}'),
        conversion_review([{}, {}]).replace(b"{},{}", b'{},{"a":"\xff"}'),
    ],
)
def test_bodies_that_are_not_json_are_400_on_both_paths(body: bytes) -> None:
    whole, split = both(body)
    assert whole[0] == 400 and b"is not JSON" in whole[1], whole
    assert split[0] == 400 and b"is not JSON" in split[1], split
    assert b"Traceback" not in split[1]


def test_an_object_that_does_not_decode_is_named() -> None:
    """The split path says which object is not JSON (the whole-body path cannot)."""
    body = conversion_review(machines(3)).replace(b"marker-0001", b"marker-\xff001")
    status, answer = converter(SPLIT).review(body)
    assert status == 400
    assert b"request.objects[1]" in answer


def test_a_failed_conversion_is_answered_alike() -> None:
    """One object a converter refuses: the same Failure, byte for byte."""
    objects = machines(5)
    objects[3]["apiVersion"] = V1
    objects[3]["spec"] = {"size": 1, "image": "bad!image"}
    whole, split = both(conversion_review(objects, desired=V2))
    assert split == whole
    assert orjson.loads(whole[1])["response"]["result"]["status"] == "Failure"


# --------------------------------------------------------------------------- differential

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def conversion_bodies(draw: st.DrawFn) -> bytes:
    """ConversionReview-like bodies: real objects, damaged fields, odd values, cut short."""
    objects: Any = [
        draw(st.just(hub_object(name=f"m{i}")) | json_values)
        for i in range(draw(st.integers(0, 4)))
    ]
    request: Any = {
        "uid": draw(st.just("u") | json_values),
        "desiredAPIVersion": draw(st.sampled_from([V1, "other/v1"]) | json_values),
        "objects": draw(st.just(objects) | json_values),
    }
    review: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["apiextensions.k8s.io/v1", "v1"])),
        "kind": draw(st.sampled_from(["ConversionReview", "AdmissionReview"])),
        "request": draw(st.just(request) | json_values),
    }
    for key in draw(st.lists(st.sampled_from(["apiVersion", "kind", "request"]), max_size=2)):
        review.pop(key, None)
    extra = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=2))
    body = orjson.dumps({**extra, **review} if draw(st.booleans()) else review)
    if draw(st.integers(0, 4)) == 0:
        body = body[: draw(st.integers(0, len(body)))]
    return body


DIFFERENTIAL = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@DIFFERENTIAL
@given(body=conversion_bodies())
def test_split_and_whole_answer_every_conversion_body_alike(body: bytes) -> None:
    same_answer(*both(body))


@st.composite
def admission_bodies(draw: st.DrawFn) -> bytes:
    request: Any = {
        "uid": draw(st.just("a") | json_values),
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "x"]) | json_values),
        "object": draw(st.just(vessel("v")) | json_values),
        "oldObject": draw(st.just(vessel("v", capacity=9)) | json_values),
        "name": draw(st.just("v") | json_values),
        "namespace": draw(st.just("sea") | json_values),
        "dryRun": draw(st.booleans() | json_values),
        "userInfo": draw(st.just({"username": "u"}) | json_values),
    }
    for key in draw(st.lists(st.sampled_from(sorted(request)), max_size=3)):
        request.pop(key, None)
    review: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])),
        "kind": draw(st.sampled_from(["AdmissionReview", "ConversionReview"])),
        "request": draw(st.just(request) | json_values),
    }
    body = orjson.dumps(review)
    if draw(st.integers(0, 4)) == 0:
        body = body[: draw(st.integers(0, len(body)))]
    return body


def admission_pair(
    make: Callable[[], Any], workers: ReviewWorkers
) -> tuple[AdmissionWebhook, AdmissionWebhook]:
    return (
        AdmissionWebhook(make(), inline_body_size=WHOLE, workers=workers),
        AdmissionWebhook(make(), inline_body_size=SPLIT, workers=workers),
    )


@DIFFERENTIAL
@given(body=admission_bodies(), mutating=st.booleans())
async def test_split_and_whole_answer_every_admission_body_alike(
    body: bytes, mutating: bool
) -> None:
    pool = ReviewWorkers(1)
    try:
        whole, split = admission_pair(VesselDefaulter if mutating else VesselValidator, pool)
        answers = []
        for hook in (whole, split):
            response = await hook(HttpRequest("POST", hook.spec.path, body=body))
            answers.append((response.status, response.body))
        same_answer(answers[0], answers[1])
    finally:
        pool.close()


# --------------------------------------------------------------------------- nesting

DEPTHS = [*range(998, 1031), 1100, 5000]
"""Around orjson's limit (1,024) and msgspec's, which is the interpreter's C recursion limit:
about 1,000 on Python 3.11, 1,500 on 3.12, 10,000 on 3.13. The verdict must not move with it."""


def deep_json(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def deep_conversion_review(where: str, depth: int) -> bytes:
    """A ConversionReview nested exactly ``depth`` levels deep, at ``where``: an extra field
    of the envelope, of the request, or of an object (one no converter takes, so the answer
    is the same Failure either way and nothing deep is encoded back)."""
    marker = b'"deep":"here"'
    if where == "envelope":
        body = conversion_review(machines(2))
        return body[:-1] + b"," + marker.replace(b'"here"', deep_json(depth - 1)) + b"}"
    if where == "request":
        body = conversion_review(machines(2))
        return body[:-2] + b"," + marker.replace(b'"here"', deep_json(depth - 2)) + b"}}"
    body = conversion_review([{"apiVersion": "other.dev/v1", "kind": "Nope", "deep": "here"}])
    return body.replace(marker, marker.replace(b'"here"', deep_json(depth - 4)))


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("where", ["envelope", "request", "object"])
def test_deep_conversion_reviews_get_orjsons_verdict_on_both_paths(where: str, depth: int) -> None:
    """Nested up to 1,024 levels: answered (200); deeper: 400, not JSON. Split and whole
    alike on every Python (before: the split refused from ~1,000 levels on 3.11, and
    answered up to 1,500 on 3.12 and 10,000 on 3.13)."""
    body = deep_conversion_review(where, depth)
    assert body.count(b"[") >= depth - 4
    whole, split = both(body)
    assert whole[0] == (200 if depth <= 1024 else 400), whole
    same_answer(whole, split)


def deep_admission_review(where: str, depth: int) -> bytes:
    """An AdmissionReview (UPDATE of a Vessel) nested exactly ``depth`` levels deep at
    ``where``: an extra field of the envelope, ``request.options`` (which no check reads),
    or a field of ``request.object``."""
    marker = b'"deep":"here"'
    body = admission_review(obj={**vessel("v"), "deep": "here"}, old=vessel("v"))
    if where == "envelope":
        body = body.replace(marker, b'"deep":"x"')[:-1] + b"," + marker + b"}"
        return body.replace(b'"here"', deep_json(depth - 1))
    if where == "request":
        body = body.replace(marker, b'"deep":"x"')[:-2] + b',"options":"here"}}'
        return body.replace(b'"here"', deep_json(depth - 2))
    return body.replace(b'"here"', deep_json(depth - 3))


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("where", ["envelope", "request", "object"])
async def test_deep_admission_reviews_get_orjsons_verdict_on_both_paths(
    where: str, depth: int, workers: ReviewWorkers
) -> None:
    body = deep_admission_review(where, depth)
    answers = []
    for hook in admission_pair(VesselValidator, workers):
        response = await hook(HttpRequest("POST", hook.spec.path, body=body))
        answers.append((response.status, response.body))
    assert answers[0][0] == (200 if depth <= 1024 else 400), answers[0]
    same_answer(answers[0], answers[1])


@pytest.mark.parametrize(
    ("value", "levels"),
    [
        (b"[]", 1),
        (b'"[[["', 0),
        (b'{"a":"]]]","b":[["\\"[["]]}', 3),
        (b'["\\\\",["\\\\\\"[[",[]]]', 3),
        (b'["\\\\\\\\"]', 1),
        (b'{"k\\"{{":{"\\u005c":[1,{"x":"\\\\"}]}}', 4),
        (b"1", 0),
    ],
)
def test_exceeds_depth_counts_brackets_outside_strings_only(value: bytes, levels: int) -> None:
    """Escaped quotes and backslashes are followed; every block size gives the same answer
    (a block may end anywhere but inside a run of backslashes)."""
    orjson.loads(value)  # valid JSON
    for block in (1, 2, 3, 5, 8, 1 << 20):
        assert not exceeds_depth(value, levels, block=block), block
        assert exceeds_depth(value, levels - 1, block=block) == (levels > 0), block


def depth_of(value: Any) -> int:
    """Nesting of arrays and objects in ``value`` (iterative: values may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


tricky_text = st.text(alphabet=st.sampled_from('[]{}"\\ab\n\u00e9'), max_size=8)
tricky_values = st.recursive(
    st.none() | st.integers(-(2**63), 2**63 - 1) | tricky_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(tricky_text, children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=tricky_values, block=st.integers(1, 64))
def test_exceeds_depth_agrees_with_the_nesting_of_any_value(value: Any, block: int) -> None:
    data = orjson.dumps(value)
    depth = depth_of(value)
    assert not exceeds_depth(data, depth, block=block)
    if depth:
        assert exceeds_depth(data, depth - 1, block=block)


def test_a_split_review_nested_past_the_limit_is_refused_before_its_objects_are_counted() -> None:
    """Whole: orjson refuses the body (400) before the object count is checked (413); the
    split measures the depth first, so it answers 400 too."""
    body = conversion_review([{}] * 300)[:-2] + b',"deep":' + deep_json(1100) + b"}}"
    whole, split = both(body, max_review_objects=200)
    assert whole[0] == 400
    same_answer(whole, split)


@pytest.mark.parametrize(
    "extra",
    [b'"junk":1e400', b'"junk":"\xff"', b'"junk":[1,{"a":-1e999}]'],
)
@pytest.mark.parametrize("where", ["envelope", "request"])
def test_fields_no_check_reads_are_refused_as_decoding_whole_refuses_them(
    extra: bytes, where: str
) -> None:
    """A field the handler never reads is still decoded when the whole body is: a number out
    of range or bad UTF-8 there is a 400 on both paths (before: the split skipped it, 200)."""
    body = conversion_review(machines(2))
    body = (
        body[:-1] + b"," + extra + b"}" if where == "envelope" else body[:-2] + b"," + extra + b"}}"
    )
    whole, split = both(body)
    assert whole[0] == 400, whole
    same_answer(whole, split)
    assert b"junk" in split[1], "the split names the field"


def test_an_unread_field_larger_than_max_object_size_is_refused_naming_it() -> None:
    body = conversion_review(machines(1))[:-2] + b',"junk":"' + b"x" * 5000 + b'"}}'
    status, answer = converter(SPLIT, max_object_size=4096).review(body)
    assert status == 413, answer
    assert b"request.junk" in answer and b"WebhookServerOptions.max_object_size" in answer
