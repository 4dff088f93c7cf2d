"""Large reviews (issue 27, finding 2): decoded and answered off the event loop, at most
``review_workers`` at once, refused before decoding when they would take too much memory.

Every test here is structural: which thread ran the work, how many ran at once, whether the
loop answered a probe meanwhile. None measures time (bench/conversion/loop_lag.py does).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Self

import aiohttp
import orjson
import pydantic
import pytest

import setpoint as sp
from setpoint.api.conversion import Convertible
from setpoint.api.errors import SetpointError
from setpoint.observability.metrics import Metrics
from setpoint.server.address import BindAddress
from setpoint.server.http import Http1Server, HttpRequest, HttpResponse, HttpServerOptions
from setpoint.testing import serving_certificate
from setpoint.webhook import (
    AdmissionWebhook,
    ConversionWebhook,
    MalformedAdmissionReview,
    StaticCertificate,
    WebhookServer,
    WebhookServerOptions,
)
from setpoint.webhook.reviews import ReviewTooLarge, ReviewWorkers

GROUP = "large.test.setpoint.dev"
MIB = 1024 * 1024
INLINE = 1024
"""The inline threshold the handlers here are built with: bodies above it are large."""


class Gate:
    """Where converters and validators report in: which thread, how many inside at once.

    A call from the loop thread never blocks (so today's code, which converts on the loop,
    fails the assertions instead of hanging); a call from any other thread waits until the
    test releases it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(None)

    def reset(self, loop_thread: threading.Thread | None) -> None:
        """Forget every visit; ``loop_thread`` is the thread that must never wait."""
        self.threads: list[str] = []
        self.inside = 0
        self.most_inside = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.loop_thread = loop_thread

    def visit(self) -> None:
        current = threading.current_thread()
        with self.lock:
            self.threads.append(current.name)
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        self.entered.set()
        try:
            if current is not self.loop_thread:
                self.release.wait(30)
        finally:
            with self.lock:
                self.inside -= 1


GATE = Gate()


@pytest.fixture
def gate() -> Iterator[Gate]:
    GATE.reset(threading.current_thread())
    yield GATE
    GATE.release.set()


class GaugeSpec(sp.Model):
    """The hub's spec."""

    level: int = 0
    note: str = ""


@sp.resource(group=GROUP, version="v2", kind="Gauge", storage=True)
class Gauge(sp.Resource):
    """The hub."""

    spec: GaugeSpec


class GaugeSpecV1(sp.Model):
    """The spoke's spec: the same fields under other names."""

    height: int = 0
    text: str = ""


@sp.resource(group=GROUP, version="v1", kind="Gauge")
class GaugeV1(sp.Resource, Convertible[Gauge]):
    """A spoke whose conversion reports to the gate."""

    spec: GaugeSpecV1

    def to_hub(self) -> Gauge:
        GATE.visit()
        return Gauge(metadata=self.metadata, spec=GaugeSpec(level=self.spec.height))

    @classmethod
    def from_hub(cls, hub: Gauge) -> Self:
        GATE.visit()
        return cls(metadata=hub.metadata, spec=GaugeSpecV1(height=hub.spec.level))


class DialSpec(sp.Model):
    """What a dial holds; decoding it reports to the gate."""

    reading: int = 0
    note: str = ""

    @pydantic.field_validator("reading")
    @classmethod
    def _reported(cls, value: int) -> int:
        GATE.visit()
        return value


@sp.resource(group=GROUP, version="v1", kind="Dial")
class Dial(sp.Resource):
    """An admission-checked kind."""

    spec: DialSpec


class DialValidator(sp.CustomValidator[Dial]):
    """Allows every dial; records the thread user code runs on."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def validate_create(self, obj: Dial) -> sp.Warnings:
        """Allow, noting the thread."""
        self.threads.append(threading.current_thread().name)
        return None


def gauge(name: str, note: str = "") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v2",
        "kind": "Gauge",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"level": 1, "note": note},
    }


def conversion_review(objects: list[Any], uid: str = "u-1") -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": f"{GROUP}/v1", "objects": objects},
        }
    )


def admission_review(note: str) -> bytes:
    obj = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Dial",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"reading": 3, "note": note},
    }
    request = {"uid": "a-1", "operation": "CREATE", "name": "d", "namespace": "ns", "object": obj}
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


@pytest.fixture
async def workers() -> AsyncIterator[ReviewWorkers]:
    pool = ReviewWorkers(1)
    yield pool
    pool.close()


def converter(workers: ReviewWorkers, **options: Any) -> ConversionWebhook:
    hook = ConversionWebhook(inline_body_size=INLINE, workers=workers, **options)
    hook.register(Gauge, GaugeV1)
    return hook


async def until(condition: Any, attempts: int = 500) -> bool:
    """Let the loop run until ``condition()`` holds (or give up: the caller asserts)."""
    for _ in range(attempts):
        if condition():
            return True
        await asyncio.sleep(0.005)
    return bool(condition())


# --------------------------------------------------------------------------- off the loop


async def test_a_large_conversion_review_is_converted_off_the_loop_thread(
    gate: Gate, workers: ReviewWorkers
) -> None:
    """One object with a large note: above the inline size, so it runs in a review worker."""
    body = conversion_review([gauge("g", note="x" * 4 * INLINE)])
    gate.release.set()
    response = await converter(workers)(HttpRequest("POST", "/convert", body=body))
    assert response.status == 200, response.body
    assert orjson.loads(response.body)["response"]["result"] == {"status": "Success"}
    assert gate.threads, "the converter never ran"
    assert all(name.startswith("webhook-review") for name in gate.threads), gate.threads


async def test_a_small_review_stays_inline(gate: Gate, workers: ReviewWorkers) -> None:
    """The fast path: a one-object review below the inline size is converted on the loop."""
    body = conversion_review([gauge("g")])
    assert len(body) <= INLINE
    response = await converter(workers)(HttpRequest("POST", "/convert", body=body))
    assert response.status == 200
    assert gate.threads == [threading.current_thread().name]


async def test_the_loop_serves_a_probe_while_a_large_review_is_in_its_worker(
    gate: Gate, workers: ReviewWorkers
) -> None:
    """While a converter holds a worker, a probe server on the same loop answers."""

    async def healthz(request: HttpRequest) -> HttpResponse:
        return HttpResponse.text(200, "ok\n")

    probe = Http1Server("probe", BindAddress("127.0.0.1", 0), healthz, options=HttpServerOptions())
    await probe.start()
    try:
        body = conversion_review([gauge("g", note="x" * 4 * INLINE)])
        task = asyncio.create_task(converter(workers)(HttpRequest("POST", "/convert", body=body)))
        assert await until(gate.entered.is_set), "the conversion never started"
        assert gate.inside == 1 and not task.done()
        assert probe.address is not None
        reader, writer = await asyncio.open_connection(*probe.address)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
        assert gate.inside == 1 and not task.done(), "the review finished before the probe"
        gate.release.set()
        response = await task
        assert response.status == 200
    finally:
        await probe.stop(1.0)


async def test_k_plus_one_large_reviews_never_run_more_than_k_at_once(gate: Gate) -> None:
    """Two large reviews of 20 objects, one worker: the second waits for the first."""
    pool = ReviewWorkers(1)
    try:
        hook = converter(pool)
        bodies = [
            conversion_review([gauge(f"g{i}-{n}") for n in range(20)], uid=f"u{i}")
            for i in range(2)
        ]
        assert all(len(body) > INLINE for body in bodies)
        tasks = [
            asyncio.create_task(hook(HttpRequest("POST", "/convert", body=body))) for body in bodies
        ]
        assert await until(gate.entered.is_set)
        # Give a second worker every chance to start; with one worker it never does.
        await until(lambda: gate.most_inside > 1, attempts=40)
        assert gate.most_inside == 1, f"{gate.most_inside} conversions ran at once"
        gate.release.set()
        responses = await asyncio.gather(*tasks)
        assert [r.status for r in responses] == [200, 200]
        assert gate.most_inside == 1
        assert len(gate.threads) == 40
    finally:
        gate.release.set()
        pool.close()


async def test_a_large_admission_review_is_decoded_off_the_loop_thread(
    gate: Gate, workers: ReviewWorkers
) -> None:
    """The typed decode (pydantic) of a large AdmissionReview runs in a review worker; the
    validator itself, user code that may await the loop's client, runs on the loop."""
    gate.release.set()
    validator = DialValidator()
    hook = AdmissionWebhook(validator, inline_body_size=INLINE, workers=workers)
    body = admission_review("x" * 4 * INLINE)
    response = await hook(HttpRequest("POST", hook.spec.path, body=body))
    assert response.status == 200, response.body
    assert orjson.loads(response.body)["response"]["allowed"] is True
    assert gate.threads and all(n.startswith("webhook-review") for n in gate.threads)
    assert validator.threads == [threading.current_thread().name]


# --------------------------------------------------------------------------- memory bound


async def test_a_review_of_too_many_json_values_is_refused_before_decoding(
    workers: ReviewWorkers,
) -> None:
    """Counted, not decoded: a body that is not even JSON but opens 5,000 objects gets 413
    (decoding it would have said 400), naming the path, the limit and the option."""
    hook = converter(workers, max_review_values=1000)
    for body in (b"{" * 5000, conversion_review([{}] * 2000)):
        response = await hook(HttpRequest("POST", "/convert", body=body))
        assert response.status == 413, response.body
        text = response.body.decode()
        assert "/convert" in text and "1000" in text
        assert "WebhookServerOptions.max_review_values" in text


async def test_an_admission_review_of_too_many_json_values_is_refused(
    workers: ReviewWorkers,
) -> None:
    hook = AdmissionWebhook(DialValidator(), max_review_values=100, workers=workers)
    response = await hook(HttpRequest("POST", hook.spec.path, body=b"[" * 500))
    assert response.status == 413
    assert hook.spec.path in response.body.decode()
    assert "max_review_values" in response.body.decode()


def test_review_too_large_is_a_setpoint_error() -> None:
    assert issubclass(ReviewTooLarge, SetpointError) and issubclass(ReviewTooLarge, ValueError)


# --------------------------------------------------------------------------- per-path caps


@pytest.fixture
async def capped() -> AsyncIterator[tuple[WebhookServer, ssl.SSLContext]]:
    """A served /convert (cap 2 MiB) and a validator (every other path: cap 1 MiB)."""
    ca, pair = serving_certificate()
    server = WebhookServer(
        WebhookServerOptions(
            bind_address="127.0.0.1:0",
            certificate=StaticCertificate(pair),
            admission_max_body_size=MIB,
            conversion_max_body_size=2 * MIB,
        ),
        metrics=Metrics.isolated(),
    )
    server.add_conversion(Gauge, GaugeV1)
    server.add_admission(DialValidator())
    await server.start()
    try:
        yield server, ssl.create_default_context(cadata=ca.cert_pem.decode())
    finally:
        server.review_workers.close()
        await server.stop(5.0)


async def post(url: str, context: ssl.SSLContext, body: bytes) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session,
        session.post(url, data=body, headers={"Content-Type": "application/json"}) as response,
    ):
        return response.status, (await response.read()).decode(errors="replace")


async def test_each_path_has_its_own_cap(
    gate: Gate, capped: tuple[WebhookServer, ssl.SSLContext]
) -> None:
    """1.5 MiB: over the admission cap (413, unread, naming the path and the cap), under
    /convert's (answered). Above /convert's own cap: 413 there too."""
    gate.release.set()
    server, context = capped
    admission_path = next(p for p in server.paths if p != "/convert")
    body = conversion_review([gauge("g", note="x" * (3 * MIB // 2))])
    status, text = await post(server.url(admission_path), context, body)
    assert status == 413, text
    assert admission_path in text and str(MIB) in text
    assert "WebhookServerOptions.admission_max_body_size" in text, "the option a user sets"
    assert "HttpServerOptions" not in text
    status, text = await post(server.url("/convert"), context, body)
    assert status == 200, text
    bigger = conversion_review([gauge("g", note="x" * (2 * MIB + 10))])
    status, text = await post(server.url("/convert"), context, bigger)
    assert status == 413, text
    assert "/convert" in text and str(2 * MIB) in text
    assert "WebhookServerOptions.conversion_max_body_size" in text


# --------------------------------------------------------------------------- options


def test_the_caps_have_documented_defaults() -> None:
    """Admission: controller-runtime's 7 MiB; conversion: larger (a list in one review)."""
    options = WebhookServerOptions()
    assert options.admission_max_body_size == 7 * 1024 * 1024
    assert options.conversion_max_body_size > options.admission_max_body_size
    assert options.body_budget >= options.conversion_max_body_size
    assert options.review_workers >= 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"admission_max_body_size": 1000}, "admission_max_body_size=1000 is below 1 MiB"),
        ({"conversion_max_body_size": 1000}, "conversion_max_body_size=1000 is below 1 MiB"),
        ({"review_workers": 0}, "review_workers=0 must be >= 1"),
        ({"max_review_values": 0}, "max_review_values=0 must be >= 1"),
        ({"inline_body_size": -1}, "inline_body_size=-1 must be >= 0"),
        (
            {"conversion_max_body_size": 64 << 20, "body_budget": 32 << 20},
            "body_budget=33554432 is below",
        ),
    ],
)
def test_bad_options_are_refused_naming_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebhookServerOptions(**options)


# --------------------------------------------------------------------------- issue 28


def test_malformed_admission_review_is_a_setpoint_error() -> None:
    """Issue 28: every exported error derives from SetpointError, keeping its built-in base."""
    assert issubclass(MalformedAdmissionReview, SetpointError)
    assert issubclass(MalformedAdmissionReview, ValueError)
