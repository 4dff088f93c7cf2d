"""Replay a recorded race against the fake client, and explore every interleaving of writers.

Both run **writers** over a :class:`~setpoint.testing.FakeClient` and decide, one request at
a time, whose request goes next. A writer is an async function of the client it must use
(a reconcile wrapped with :func:`~setpoint.testing.context_for`, a script, a foreign
controller's write); ``setup(fake)`` registers the kinds the writers need on the fake and
returns them by name::

    def setup(fake: FakeClient) -> dict[str, WriterFunc]:
        fake.register(Gizmo)
        return {"a": mark("a"), "b": mark("b")}

- :func:`replay` reads a recording (:mod:`setpoint.observability.recording`), seeds the fake
  with the objects as they were just before the writers' first recorded request, and lets
  each writer's requests through in the recorded order. A race recorded on a real cluster
  happens again, the same way, every time. Each answer is compared with the recorded one
  (the HTTP status, and the object's spec, status, labels and annotations): a difference is
  a divergence, reported on the result.
- :func:`explore` runs the writers from a fresh fake once per ordering of their requests,
  depth first, until every ordering ran or ``max_orderings`` did, and calls the test's
  ``invariant`` on the fake after each. The orderings that break it are reported with
  their steps.

Expected Flow:
    1. Every writer task runs until it sends a request (it then waits at the gate) or ends.
    2. Once none is running, the scheduler picks one waiting writer (the recorded next one,
       or the ordering's next choice); its request runs on the fake; repeat.

Guarantees:
    - One request at a time, in the chosen order: the outcome depends only on the order
      (and on what the writers compute), not on timing. Sleeps between requests (retry
      delays) only delay; they change no order.
    - The fake answers as it does everywhere (resourceVersion conflicts, status
      subresource rules): a lost update the real server allowed, the fake allows too.

Caveats:
    - Writers must reach the client or end: a writer awaiting something else for longer
      than ``stall_timeout`` is reported as stuck (:class:`ReplayError`).
    - Only requests to objects are replayed; discovery requests and requests of anything
      other than the named writers (informers, leader election) are not.
    - The number of orderings grows fast (two writers of three requests: 20; three
      writers of three: 1,680): keep explored writers small, or bound ``max_orderings``.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from setpoint.api.errors import SetpointError
from setpoint.client.errors import ApiError
from setpoint.observability import recording
from setpoint.testing.fake import FakeClient
from setpoint.testing.faults import Call

__all__ = [
    "Exploration",
    "Replay",
    "ReplayError",
    "Step",
    "Violation",
    "WriterFunc",
    "explore",
    "replay",
]

WriterFunc = Callable[[Any], Awaitable[object]]
"""One writer of an exploration or replay: an async function that does its work through the
client it is given (the client's write protocol is :class:`setpoint.client.protocols.Writer`)."""

Setup = Callable[[FakeClient], Mapping[str, WriterFunc] | Awaitable[Mapping[str, WriterFunc]]]
Invariant = Callable[[FakeClient], Awaitable[None] | None]

_VERB_METHODS: Final[Mapping[str, str]] = {
    "get": "GET",
    "list": "GET",
    "list_page": "GET",
    "get_subresource": "GET",
    "get_scale": "GET",
    "create": "POST",
    "create_subresource": "POST",
    "update": "PUT",
    "replace_status": "PUT",
    "update_subresource": "PUT",
    "set_scale": "PUT",
    "patch": "PATCH",
    "apply": "PATCH",
    "delete": "DELETE",
    "delete_collection": "DELETE",
}
_COMPARED: Final = ("spec", "status", "data")


class ReplayError(SetpointError):
    """A writer neither sent a request nor ended in time, or the recording is unusable."""


@dataclass(slots=True)
class Step:
    """One request a writer sent, in the order it ran."""

    actor: str
    """The writer's name."""
    method: str
    """The HTTP method (``GET``, ``PUT``, ...)."""
    target: str
    """``namespace/name`` (plus ``/subresource``) of the object, or ``namespace/`` for a list."""
    status: int | None = None
    """The answer's HTTP status (``None``: no answer, the request failed otherwise)."""

    def __str__(self) -> str:
        return f"{self.actor}: {self.method} {self.target} -> {self.status}"


@dataclass(frozen=True, slots=True)
class Replay:
    """What :func:`replay` saw."""

    steps: list[Step]
    """The requests, in the order they ran."""
    divergences: list[str]
    """How the replay differed from the recording (empty: the same requests, answers and
    objects)."""
    errors: dict[str, str]
    """The writers that raised, with ``Type: message``."""
    fake: FakeClient
    """The fake after the replay, to assert on."""


@dataclass(frozen=True, slots=True)
class Violation:
    """An ordering after which the invariant did not hold."""

    steps: list[Step]
    """The ordering."""
    message: str
    """What the invariant said."""
    errors: dict[str, str]
    """The writers that raised in that ordering."""

    def __str__(self) -> str:
        return " | ".join(str(s) for s in self.steps) + f": {self.message}"


@dataclass(frozen=True, slots=True)
class Exploration:
    """What :func:`explore` found."""

    orderings: int
    """How many orderings ran."""
    complete: bool
    """Whether that is every ordering (``False``: ``max_orderings`` stopped it)."""
    violations: list[Violation] = field(default_factory=list)
    """The orderings that broke the invariant."""


def _target(call: Call) -> str:
    target = f"{call.namespace or ''}/{call.name or ''}"
    return f"{target}/{call.subresource}" if call.subresource else target


def _status_of(verb: str) -> int:
    return 201 if verb in ("create", "create_subresource") else 200


class _Scheduler:
    """Holds each writer's request at the gate until it is chosen (see the module docstring)."""

    def __init__(self, fake: FakeClient, actors: Sequence[str], stall_timeout: float) -> None:
        self.fake = fake
        self.actors = frozenset(actors)
        self.stall_timeout = stall_timeout
        self.waiting: dict[str, tuple[Call, asyncio.Future[None]]] = {}
        self.steps: list[Step] = []
        self.answers: list[Any] = []
        self.errors: dict[str, str] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._pending: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
            "setpoint_replay_pending", default=None
        )
        fake.faults.intercept("*", self._gate)

    async def _gate(self, call: Call) -> None:
        actor = recording.current_actor()
        if actor not in self.actors or call.verb == "watch":
            return
        assert actor is not None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[actor] = (call, future)
        await future
        pending = self._pending.get()
        if pending is not None:
            pending.append(len(self.steps))
        self.steps.append(
            Step(actor, _VERB_METHODS.get(call.verb, call.verb.upper()), _target(call))
        )
        self.answers.append(None)

    def client(self) -> _GatedClient:
        return _GatedClient(self)

    def start(self, writers: Mapping[str, WriterFunc]) -> None:
        for name, writer in sorted(writers.items()):
            self.tasks[name] = asyncio.create_task(
                self._run(name, writer), name=f"setpoint-writer-{name}"
            )

    async def _run(self, name: str, writer: WriterFunc) -> None:
        with recording.actor(name):
            try:
                await writer(self.client())
            except Exception as exc:
                self.errors[name] = f"{type(exc).__name__}: {exc}"

    async def settle(self) -> list[str]:
        """Wait until no writer runs; return the waiting ones, by name."""
        deadline = time.monotonic() + self.stall_timeout
        spins = 0
        while True:
            running = [
                name
                for name, task in self.tasks.items()
                if not task.done() and name not in self.waiting
            ]
            if not running:
                return sorted(self.waiting)
            if time.monotonic() > deadline:
                raise ReplayError(
                    f"writer(s) {', '.join(running)} neither sent a request nor ended within "
                    f"{self.stall_timeout:g}s: a writer may only await the client it is given "
                    "(and short sleeps)"
                )
            spins += 1
            await asyncio.sleep(0 if spins < 100 else 0.001)

    def grant(self, actor: str) -> Call:
        call, future = self.waiting.pop(actor)
        future.set_result(None)
        return call

    async def finish(self) -> None:
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


class _GatedClient:
    """The fake as a writer sees it: every call is held at the scheduler's gate."""

    def __init__(self, scheduler: _Scheduler) -> None:
        self._scheduler = scheduler

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._scheduler.fake, name)
        if not inspect.iscoroutinefunction(inner):
            return inner
        scheduler = self._scheduler

        async def gated(*args: Any, **kwargs: Any) -> Any:
            pending: list[int] = []
            token = scheduler._pending.set(pending)
            try:
                answer = await inner(*args, **kwargs)
            except ApiError as exc:
                for index in pending:
                    scheduler.steps[index].status = exc.code
                raise
            finally:
                scheduler._pending.reset(token)
            for index in pending:
                scheduler.steps[index].status = _status_of(name)
                scheduler.answers[index] = _comparable(answer)  # before the writer edits it
            return answer

        return gated


# -- replay ----------------------------------------------------------------------------------


def _parse_path(path: str) -> tuple[str, str, str, str, str] | None:
    """``(group/version, resource, namespace, name, subresource)`` of an object request."""
    parts = [p for p in path.split("?", maxsplit=1)[0].split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        api, rest = parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        api, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        return None  # discovery, /version, /openapi
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = "/".join(rest[2:])
    return api, resource, namespace, name, subresource


def _server_order(
    wanted: list[tuple[int, dict[str, Any]]],
) -> list[tuple[int, dict[str, Any]]]:
    """The recorded requests in the order the server must have applied them.

    Lines are written as answers arrive, and two requests in flight at once may be answered
    in either order: a write refused with a Conflict (409) can be answered before the
    write that beat it. A 409 came after the write it lost to, so it moves right after a
    later successful write of another actor to the same object that overlapped it (sent
    before the 409's answer arrived). Recordings without ``sent`` keep their order.
    """
    order = list(wanted)
    index = 0
    while index < len(order):
        _, entry = order[index]
        if entry.get("status") == 409 and entry.get("t") is not None:
            target = _request_target(entry)
            winner = next(
                (
                    later
                    for later in range(index + 1, len(order))
                    if order[later][1].get("actor") != entry.get("actor")
                    and order[later][1].get("method") != "GET"
                    and _request_target(order[later][1]) == target
                    and order[later][1].get("status") in (200, 201)
                    and (sent := order[later][1].get("sent")) is not None
                    and sent < entry["t"]
                ),
                None,
            )
            if winner is not None:
                order.insert(winner, order.pop(index))
                continue  # the entry now at ``index`` is the next one to look at
        index += 1
    return order


def _request_target(entry: Mapping[str, Any]) -> str | None:
    parsed = _parse_path(str(entry.get("path") or ""))
    if parsed is None:
        return None
    _, _, namespace, name, subresource = parsed
    target = f"{namespace}/{name}"
    return f"{target}/{subresource}" if subresource else target


def _objects_in(value: Any) -> list[dict[str, Any]]:
    """The objects an answer or event carries (a list's items get their kind back)."""
    if not isinstance(value, dict):
        return []
    kind = value.get("kind")
    items = value.get("items")
    if isinstance(items, list) and isinstance(kind, str) and kind.endswith("List"):
        return [
            {"apiVersion": value.get("apiVersion"), "kind": kind[: -len("List")], **item}
            for item in items
            if isinstance(item, dict)
        ]
    meta = value.get("metadata")
    if isinstance(kind, str) and kind != "Status" and isinstance(meta, dict) and "name" in meta:
        return [value]
    return []


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(meta.get("namespace") or ""),
        str(meta.get("name")),
    )


def _world_before(entries: Sequence[Mapping[str, Any]], first: int) -> list[dict[str, Any]]:
    """The objects as the recording last saw them before entry ``first``."""
    world: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for entry in entries[:first]:
        if entry.get("type") == "event":
            seen = _objects_in(entry.get("object"))
            deleted = entry.get("event") == "delete"
        elif (
            entry.get("type") == "request"
            and entry.get("status") in (200, 201)
            and not _is_discovery(str(entry.get("path") or ""))
        ):
            seen = _objects_in(entry.get("response"))
            deleted = entry.get("method") == "DELETE" and not any(
                (o.get("metadata") or {}).get("deletionTimestamp") for o in seen
            )
        else:
            continue
        for obj in seen:
            if deleted:
                world.pop(_key(obj), None)
            else:
                world[_key(obj)] = obj
    return [_clean(obj) for obj in world.values()]


def _is_discovery(path: str) -> bool:
    """Whether ``path`` asks the server what it serves (its answer holds no objects).

    ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``, ``/version`` and
    ``/openapi/...``: a client discovering a kind inside a recording (its discovery cache
    was cold) must not seed the fake with discovery documents.
    """
    parts = path.split("?", 1)[0].strip("/").split("/")
    return (
        parts[0] in ("version", "openapi")
        or (parts[0] == "api" and len(parts) <= 2)
        or (parts[0] == "apis" and len(parts) <= 3)
    )


def _clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {
        k: v
        for k, v in (obj.get("metadata") or {}).items()
        if k not in ("resourceVersion", "uid", "creationTimestamp", "managedFields")
    }
    return {**obj, "metadata": meta}


def _comparable(value: Any) -> Any:
    """What an answer is compared by (a copy): spec, status, data, labels, annotations.

    Redacted as a recording is (:func:`setpoint.observability.recording.redact`, which
    copies), so a replayed Secret's values compare equal to the recorded ``<redacted>``.
    """
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not isinstance(value, Mapping):
        return None
    value = recording.redact(dict(value))
    meta = value.get("metadata") or {}
    return (
        {k: value.get(k) for k in _COMPARED},
        meta.get("labels") or {},
        meta.get("annotations") or {},
    )


async def replay(
    path: str | Path,
    setup: Setup,
    *,
    stall_timeout: float = 10.0,
) -> Replay:
    """Replay the recording at ``path`` with ``setup``'s writers over a fresh fake.

    ``setup(fake)`` (sync or async) registers the kinds and returns the writers by the
    actor names the recording gives them (:func:`setpoint.observability.recording.actor`,
    or ``controller:namespace/name`` for a reconcile). See the module docstring.

    Raises:
        ReplayError: the recording has no request of any writer; or a writer got stuck.

    """
    entries = recording.load(path)
    fake = FakeClient()
    writers = setup(fake)
    if inspect.isawaitable(writers):
        writers = await writers
    names = set(writers)
    wanted = [
        (index, entry)
        for index, entry in enumerate(entries)
        if entry.get("type") == "request"
        and entry.get("actor") in names
        and _request_target(entry) is not None
    ]
    if not wanted:
        actors = sorted({str(e.get("actor")) for e in entries if e.get("type") == "request"})
        raise ReplayError(
            f"{path}: no request of the writers {sorted(names)}; the recording's actors are "
            f"{actors}: name the writers after them"
        )
    fake.add(*_world_before(entries, wanted[0][0]))
    wanted = _server_order(wanted)
    scheduler = _Scheduler(fake, sorted(names), stall_timeout)
    divergences: list[str] = []
    scheduler.start(writers)
    try:
        for number, (_, entry) in enumerate(wanted, 1):
            waiting = await scheduler.settle()
            actor = str(entry["actor"])
            expected = f"{actor}: {entry['method']} {_request_target(entry)}"
            if actor not in waiting:
                divergences.append(
                    f"request {number}: the recording has {expected}, but {actor} sent "
                    f"nothing (waiting: {waiting or 'none'}); replay stopped"
                )
                break
            scheduler.grant(actor)
            await scheduler.settle()
            step = scheduler.steps[-1]
            if (step.method, step.target) != (entry["method"], _request_target(entry)):
                divergences.append(f"request {number}: recorded {expected}, replayed {step}")
            if step.status != entry.get("status"):
                divergences.append(
                    f"request {number} ({expected}): recorded status {entry.get('status')}, "
                    f"replayed {step.status}"
                )
            if step.status in (200, 201) and entry.get("status") in (200, 201):
                recorded, replayed = _comparable(entry.get("response")), scheduler.answers[-1]
                if recorded is not None and replayed is not None and recorded != replayed:
                    divergences.append(
                        f"request {number} ({expected}): the answer differs: recorded "
                        f"{recorded}, replayed {replayed}"
                    )
        extra = await scheduler.settle()
        if extra and not divergences:
            divergences.append(f"{', '.join(extra)} sent more requests than the recording has")
    finally:
        await scheduler.finish()
    return Replay(list(scheduler.steps), divergences, dict(scheduler.errors), fake)


# -- explore ---------------------------------------------------------------------------------


async def _run_ordering(
    setup: Setup,
    invariant: Invariant,
    prefix: Sequence[str],
    *,
    max_steps: int,
    stall_timeout: float,
) -> tuple[list[str], list[list[str]], Violation | None]:
    fake = FakeClient()
    writers = setup(fake)
    if inspect.isawaitable(writers):
        writers = await writers
    scheduler = _Scheduler(fake, sorted(writers), stall_timeout)
    choices: list[str] = []
    enabled_sets: list[list[str]] = []
    scheduler.start(writers)
    try:
        while True:
            enabled = await scheduler.settle()
            if not enabled:
                break
            if len(choices) >= max_steps:
                raise ReplayError(
                    f"the writers sent more than max_steps={max_steps} requests in one "
                    "ordering; raise max_steps or make the writers smaller"
                )
            position = len(choices)
            actor = prefix[position] if position < len(prefix) else enabled[0]
            if actor not in enabled:
                raise ReplayError(f"ordering {list(prefix)}: {actor} is not waiting ({enabled})")
            choices.append(actor)
            enabled_sets.append(enabled)
            scheduler.grant(actor)
    finally:
        await scheduler.finish()
    try:
        result = invariant(fake)
        if inspect.isawaitable(result):
            await result
    except AssertionError as exc:
        message = str(exc) or "the invariant failed"
        return choices, enabled_sets, Violation(list(scheduler.steps), message, scheduler.errors)
    return choices, enabled_sets, None


async def explore(
    setup: Setup,
    invariant: Invariant,
    *,
    max_orderings: int = 1000,
    max_steps: int = 64,
    stall_timeout: float = 10.0,
) -> Exploration:
    """Run ``setup``'s writers under every ordering of their requests; check ``invariant``.

    ``setup(fake)`` is called afresh for each ordering (seed the fake there, with
    ``fake.add``); ``invariant(fake)`` (sync or async) raises ``AssertionError`` when the
    end state is wrong. Orderings are enumerated depth first; each runs once.

    Raises:
        ReplayError: a writer got stuck, or sent more than ``max_steps`` requests.

    """
    stack: list[list[str]] = [[]]
    orderings = 0
    violations: list[Violation] = []
    while stack and orderings < max_orderings:
        prefix = stack.pop()
        choices, enabled_sets, violation = await _run_ordering(
            setup, invariant, prefix, max_steps=max_steps, stall_timeout=stall_timeout
        )
        orderings += 1
        if violation is not None:
            violations.append(violation)
        # Every alternative not yet taken after the prefix is an ordering still to run.
        for position in range(len(choices) - 1, len(prefix) - 1, -1):
            for other in reversed(enabled_sets[position]):
                if other != choices[position] and other > choices[position]:
                    stack.append([*choices[:position], other])
    return Exploration(orderings, complete=not stack, violations=violations)
