"""Bad input stops instead of looping: terminal errors, their condition and Event, repeats.

A controller runs over the FakeClient and a real Cache. Its reconciler reads a label
selector from the object's spec, as the SecretMirror of issue 10 did.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import setpoint as sp
from setpoint.api import kinds
from setpoint.api.conditions import find_condition
from setpoint.api.owners import owner_reference
from setpoint.cache import Cache
from setpoint.client.errors import Invalid
from setpoint.controller import Builder, Controller, ControllerOptions
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.controller.terminal import terminal_reason
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient, FakeRecorder, eventually

FAST = RateLimiterOptions(base_delay=0.001, max_delay=0.02)
KEY = sp.ObjectKey("default", "m")
MIRROR = sp.GroupVersionKind("terminal.test.setpoint.dev", "v1", "Mirror")


class MirrorSpec(sp.Model):
    """What to mirror where."""

    selector: str = ""
    """Namespaces to mirror into (a label selector)."""


class MirrorStatus(sp.Model):
    """What happened."""

    conditions: list[sp.Condition] = sp.field(default_factory=list)
    """Conditions."""


@sp.resource(group="terminal.test.setpoint.dev", version="v1")
class Mirror(sp.Resource):
    """A test kind whose spec carries a selector."""

    spec: MirrorSpec
    status: MirrorStatus | None = None


def mirror(selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "terminal.test.setpoint.dev/v1",
        "kind": "Mirror",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"selector": selector},
    }


class Calls:
    def __init__(self) -> None:
        self.count = 0

    async def reconcile(self, ctx: sp.Context, request: sp.Request) -> None:
        self.count += 1
        obj = await ctx.reader.get(Mirror, request.name, namespace=request.namespace)
        await ctx.reader.list(kinds.Namespace, labels=obj.spec.selector)


class Running:
    def __init__(self, fake: FakeClient, controller: Controller, recorder: FakeRecorder) -> None:
        self.fake, self.controller, self.recorder = fake, controller, recorder

    def stalled(self) -> sp.Condition | None:
        stored = self.fake.lookup(MIRROR, "m", namespace="default")
        assert stored is not None
        return find_condition(stored.get("status") or {}, "Stalled")


@pytest.fixture
async def fake() -> FakeClient:
    client = FakeClient(resources=[Mirror])
    await client.create(mirror("not a label!"))
    return client


@contextlib.asynccontextmanager
async def start(
    fake: FakeClient, reconciler: Any, *, options: ControllerOptions | None = None
) -> AsyncIterator[Running]:
    cache = Cache(fake)
    recorder = FakeRecorder()
    builder = Builder("mirror").for_(Mirror).owns(kinds.ConfigMap)
    builder.with_options(options or ControllerOptions(rate_limits=FAST))
    controller = builder.build(
        reconciler,
        client=fake,
        cache=cache,
        recorder=recorder,
        metrics=Metrics(CollectorRegistry()),
    )
    await cache.start()
    await controller.start()
    try:
        yield Running(fake, controller, recorder)
    finally:
        await controller.stop(5)
        await cache.stop(5)


async def test_an_invalid_selector_stalls_the_object_until_it_changes(fake: FakeClient) -> None:
    """An invalid selector is reconciled once, reported, and not retried until a spec change.

    The object gets a Stalled condition (reason InvalidSelector) and a Warning Event. Later
    events that do not change the object (a child's event, an explicit enqueue, the
    condition write itself) do not reconcile it; fixing the selector does, and the success
    removes the condition.
    """
    calls = Calls()
    async with start(fake, calls) as run:
        await eventually(lambda: run.stalled() is not None, timeout=5)
        condition = run.stalled()
        assert condition is not None
        assert condition.status == "True" and condition.reason == "InvalidSelector"
        assert "not a label!" in condition.message
        assert run.recorder.reasons() == ["InvalidSelector"]
        await run.controller.wait_idle(timeout=5, settle=0.2)
        assert calls.count == 1

        # A child's event and an explicit enqueue map to the key; nothing changed: skipped.
        stored = fake.lookup(MIRROR, "m", namespace="default")
        assert stored is not None
        await fake.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "child",
                    "namespace": "default",
                    "ownerReferences": [owner_reference(stored, controller=True)],
                },
            }
        )
        run.controller.enqueue(KEY)
        await run.controller.wait_idle(timeout=5, settle=0.2)
        assert calls.count == 1

        # The user fixes the spec: reconciled again, and the condition goes.
        stored["spec"]["selector"] = "team=a"
        await fake.update(stored)
        await eventually(lambda: run.stalled() is None, timeout=5)
        assert calls.count >= 2  # the fix, then the event of the condition's removal


async def test_a_server_422_with_causes_is_terminal_and_a_lost_test_is_not() -> None:
    """A desired child the server refuses (422 naming a field) stops; a failed patch test retries.

    The child is named from the spec ("Not_A_Name" is not a DNS name): the fake answers
    422 Invalid with a cause on metadata.name, as the API server does.
    """
    invalid_name: list[int] = []

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        invalid_name.append(1)
        await ctx.client.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "Not_A_Name", "namespace": request.namespace},
            }
        )

    fake = FakeClient(resources=[Mirror])
    await fake.create(mirror("team=a"))
    async with start(fake, reconcile) as run:
        await eventually(lambda: run.stalled() is not None, timeout=5)
        condition = run.stalled()
        assert condition is not None and condition.reason == "Invalid"
        assert "metadata.name" in condition.message
        await run.controller.wait_idle(timeout=5, settle=0.2)
        assert len(invalid_name) == 1
    lost_race = Invalid("the test operation failed", code=422, reason="Invalid")
    assert terminal_reason(lost_race) is None  # no causes: a failed JSON-patch test


async def test_the_same_traceback_is_printed_once_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug that fails every retry prints its traceback once; repeats are counted lines."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        raise KeyError("spec")  # the same bug, every time

    fake = FakeClient(resources=[Mirror])
    await fake.create(mirror("team=a"))
    caplog.set_level(logging.DEBUG, logger="setpoint.controller")
    async with start(fake, reconcile) as run:
        await eventually(
            lambda: run.controller.queue.num_requeues(KEY) >= 16, timeout=10, interval=0.01
        )
    failures = [r for r in caplog.records if "retrying with backoff" in r.getMessage()]
    assert len(failures) >= 16
    with_traceback = [r for r in failures if r.exc_info]
    assert len(with_traceback) == 1
    errors = [r for r in failures if r.levelno == logging.ERROR]
    # Error-level lines at repeats 1, 2, 4, 8, 16: the rest are debug.
    assert 5 <= len(errors) <= 6
    assert all("the same error as before" in r.getMessage() for r in errors[1:])


def test_terminal_condition_option_is_validated() -> None:
    """ControllerOptions.terminal_condition must be a condition type, or None."""
    assert ControllerOptions().terminal_condition == "Stalled"
    assert ControllerOptions(terminal_condition=None).terminal_condition is None
    with pytest.raises(ValueError, match="terminal_condition='not a type'"):
        ControllerOptions(terminal_condition="not a type")


def test_selector_error_is_exported() -> None:
    """sp.SelectorError is the error an invalid selector raises, and it is terminal."""
    from setpoint.cache.selectors import LabelMatcher

    with pytest.raises(sp.SelectorError) as info:
        LabelMatcher.parse("not a label!")
    assert terminal_reason(info.value) == "InvalidSelector"


SECRET = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLXBhcnQ"


async def test_credentials_in_a_terminal_error_never_reach_the_event_or_condition() -> None:
    """A token in the error text is masked in the Event and the Stalled condition.

    Everyone who may read the object reads its conditions and Events; the text of an
    exception raised by user code or a library is not the operator's to publish
    (issue 18, untrusted input: redact cleanup and error text before it leaves).
    """

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        raise sp.TerminalError(
            f"the directory refused Authorization: Bearer {SECRET} for https://bob:hunter2@dir"
        )

    fake = FakeClient(resources=[Mirror])
    await fake.create(mirror("team=a"))
    async with start(fake, reconcile) as run:
        await eventually(lambda: run.stalled() is not None, timeout=5)
        condition = run.stalled()
        assert condition is not None
        (event,) = run.recorder.events
        for text in (condition.message, event.message):
            assert SECRET not in text and "hunter2" not in text, text
            assert "Bearer <redacted>" in text and "https://<redacted>@dir" in text, text


class SelectingSpec(sp.Model):
    """A typed selector: the Python model checks the label rules."""

    selector: sp.LabelSelector
    """Namespaces to select."""


@sp.resource(group="terminal.test.setpoint.dev", version="v1")
class SecretSelecting(sp.Resource):
    """A test kind whose typed spec refuses what the (fake) server stored.

    Its name holds "Secret", as issue 10's SecretMirror did: the error text must not look
    like a credential pair (``SecretMirror: ...``) to the redaction of conditions.
    """

    spec: SelectingSpec
    status: MirrorStatus | None = None


SELECTING = sp.GroupVersionKind("terminal.test.setpoint.dev", "v1", "SecretSelecting")
BAD_SELECTOR = {"matchExpressions": [{"key": "not a label!", "operator": "Exists"}]}


def secret_selecting(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "terminal.test.setpoint.dev/v1",
        "kind": "SecretSelecting",
        "metadata": {"name": "s", "namespace": "default", **metadata},
        "spec": {"selector": BAD_SELECTOR},
    }


async def test_a_stored_object_its_type_refuses_stalls_instead_of_looping() -> None:
    """An object the typed class cannot decode is terminal for that object, until it changes.

    Issue 10's SecretMirror with a typed ``sp.LabelSelector``: an object stored before the
    CRD carried the selector rules (or held by a fake, which checks none) made every
    ``ctx.reader.get`` raise pydantic's ValidationError, a panic retried forever. Now the
    cache raises ``UndecodableObject`` naming the object and the field; the controller
    records ``Stalled`` (reason ``InvalidObject``) and an Event, reconciles once, and runs
    again when the object is fixed. The same error about another object is retried.
    """
    gvk = SELECTING
    fake = FakeClient(resources=[SecretSelecting])
    await fake.create(secret_selecting())
    calls = 0
    caught: list[BaseException] = []

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        nonlocal calls
        calls += 1
        try:
            await ctx.reader.get(SecretSelecting, request.name, namespace=request.namespace)
        except Exception as exc:
            caught.append(exc)
            raise

    def stalled() -> sp.Condition | None:
        stored = fake.lookup(gvk, "s", namespace="default")
        assert stored is not None
        return find_condition(stored.get("status") or {}, "Stalled")

    cache = Cache(fake)
    recorder = FakeRecorder()
    controller = (
        Builder("selecting")
        .for_(SecretSelecting)
        .with_options(ControllerOptions(rate_limits=FAST))
        .build(reconcile, client=fake, cache=cache, recorder=recorder)
    )
    await cache.start()
    await controller.start()
    try:
        await eventually(lambda: stalled() is not None, timeout=5)
        condition = stalled()
        assert condition is not None
        assert condition.reason == "InvalidObject"
        assert "SecretSelecting default/s" in condition.message
        assert "<redacted>" not in condition.message, condition.message
        assert "spec.selector.matchExpressions.0" in condition.message
        assert "fix the object, or relax the type" in condition.message
        assert recorder.reasons() == ["InvalidObject"]
        await controller.wait_idle(timeout=5, settle=0.2)
        assert calls == 1
        error = caught[0]
        assert isinstance(error, sp.UndecodableObject) and isinstance(error, ValueError)
        assert terminal_reason(error, (gvk, sp.ObjectKey("default", "other"))) is None
        assert terminal_reason(error) is None

        stored = await fake.get(gvk, "s", namespace="default")
        stored["spec"] = {"selector": {"matchLabels": {"team": "a"}}}
        await fake.update(stored)
        await eventually(lambda: stalled() is None, timeout=5)
        assert calls >= 2
    finally:
        await controller.stop(5)
        await cache.stop(5)


async def test_a_deleting_object_its_type_refuses_stalls_before_its_cleanup() -> None:
    """A finalizer cleanup that takes the typed object does not loop on one it cannot decode.

    The object keeps its finalizer (the cleanup never ran), and says why: ``Stalled`` with
    reason ``InvalidObject``, not a panic retried with a traceback.
    """
    fake = FakeClient(resources=[SecretSelecting])
    await fake.create(secret_selecting(finalizers=["terminal.test.setpoint.dev/cleanup"]))
    await fake.delete(SELECTING, "s", namespace="default")
    cleanups: list[object] = []

    async def cleanup(ctx: sp.Context, obj: SecretSelecting) -> None:
        cleanups.append(obj)

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        raise AssertionError("reconcile is not called for a deleting object")

    cache = Cache(fake)
    recorder = FakeRecorder()
    controller = (
        Builder("selecting")
        .for_(SecretSelecting)
        .finalizer("terminal.test.setpoint.dev/cleanup", cleanup)
        .with_options(ControllerOptions(rate_limits=FAST))
        .build(reconcile, client=fake, cache=cache, recorder=recorder)
    )

    def stalled() -> sp.Condition | None:
        stored = fake.lookup(SELECTING, "s", namespace="default")
        assert stored is not None
        return find_condition(stored.get("status") or {}, "Stalled")

    await cache.start()
    await controller.start()
    try:
        await eventually(lambda: stalled() is not None, timeout=5)
        condition = stalled()
        assert condition is not None and condition.reason == "InvalidObject"
        assert "spec.selector.matchExpressions.0" in condition.message
        await controller.wait_idle(timeout=5, settle=0.2)
        assert cleanups == []
        stored = fake.lookup(SELECTING, "s", namespace="default")
        assert stored is not None
        assert stored["metadata"]["finalizers"] == ["terminal.test.setpoint.dev/cleanup"]
    finally:
        await controller.stop(5)
        await cache.stop(5)
