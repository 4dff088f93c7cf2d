"""Blocking code in a controller: plain ``def`` reconcilers and cleanups, run in threads.

Most SDKs an operator talks to (cloud SDKs, database drivers, Vault and LDAP clients) are
synchronous. A reconciler or a finalizer cleanup written as a plain function is welcome::

    def reconcile(ctx: SyncContext, request: Request) -> Result | None:
        try:
            bucket = ctx.reader.get(Bucket, request.name, namespace=request.namespace)
        except NotFound:
            return None
        s3.create_bucket(Bucket=bucket.spec.name)           # blocks: fine, it is a thread
        ctx.client.apply(status_of(bucket))                  # no await
        return Result(requeue_after=300)

The controller tells the two kinds apart by the function (:func:`is_blocking`: an ``async
def`` runs on the event loop, a plain ``def`` in a thread) and runs a blocking one in a
thread pool of its own, :class:`ReconcileThreads`, with as many threads as
``max_concurrent_reconciles``: each worker holds at most one thread at a time, so the pool
never queues. The event loop (every other reconcile, the watches, the probes, leader
election) keeps running while a thread blocks.

What the code in the thread gets is a :class:`SyncContext`: the reconcile's
:class:`~setpoint.controller.reconcile.Context` with a synchronous facade over its client
(:class:`SyncClient`) and reader (:class:`SyncReader`). Each call runs the async method on
the manager's event loop (``asyncio.run_coroutine_threadsafe``, in the reconcile's context
variables, so read-after-write, the reconcile's read mark, recording and tracing work as in
async code) and waits for it in the thread. Anything else async (the safe-write helpers:
``update_status``, ``apply_child``, ...) runs through :meth:`SyncContext.run`.

Expected flow
-------------
1. A worker takes a key and calls :meth:`ReconcileThreads.call` with the function and the
   reconcile's ``Context``; the call starts the function in a pool thread, with a
   :class:`SyncContext`, and awaits it.
2. The function reads and writes through the facade; every call goes to the loop and back.
3. Its return value (or exception) becomes the reconcile's outcome, exactly as for an
   ``async def`` reconciler (:mod:`setpoint.controller.controller`).

Guarantees
----------
- A key is never reconciled by two threads at once: a worker waits for its thread to end,
  even after the reconcile's timeout, so the key stays held (and its worker busy) until
  the thread is done. No thread is ever abandoned while the controller runs.
- After the timeout (``reconcile_timeout``; a cleanup's ``deadline``) or a stop, the
  facade refuses new calls: each raises ``asyncio.CancelledError``, as the next ``await``
  would in async code, and a call in flight is cancelled on the loop.
- A thread still running after its reconcile was cancelled is reported at once: a warning
  naming the object, with the thread's current stack, and
  ``setpoint_reconcile_threads_overdue{controller}`` (running now) and
  ``setpoint_reconcile_threads_overdue_total{controller}``. When it ends, another line says
  how long after.
- The facade refuses to be called on the event loop's own thread (it would wait for the
  loop it blocks: a deadlock) with a :class:`~setpoint.controller.reconcile.ControllerError`.

Caveats (what threads do not allow)
-----------------------------------
- Python cannot interrupt a thread. Code blocked in an SDK call, a ``time.sleep`` or a
  loop that never calls the facade runs on past the timeout: give the SDK its own timeouts,
  and check :attr:`SyncContext.cancelled` in long loops. The overdue metric and warning
  show such a thread at once; the reconcile is counted as timed out (``ReconcileTimeout``,
  retried with backoff) when the thread ends.
- A controller stopping (shutdown, lost leadership) does not wait past its stop budget:
  threads still running are left to finish (their facade calls fail) and the process's exit
  waits for them, as Python waits for any non-daemon thread. In this process, a controller
  of the same name started later waits for such a thread before it runs its key; with a
  lost lease another *replica* may start reconciling while the tail of such a thread still
  runs, exactly like work an async reconcile started before it was cancelled; reconcilers
  stay idempotent.
- Each facade call costs a round trip through the loop (0.06-0.1 ms where the awaited call
  costs 0.01-0.02 ms; ``docs/benchmarks.md``). Batch many small reads in one
  :meth:`SyncContext.run` if it matters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.jsonvalues import copy_json
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject
from setpoint.api.types import Kind, Obj, TypedObject, is_typed
from setpoint.client.objects import ObjectList
from setpoint.client.patch import Patch
from setpoint.client.server_warnings import FieldValidation
from setpoint.controller.reconcile import Context, ControllerError, Request
from setpoint.observability.events import EventRecorder
from setpoint.observability.logging import Logger

if TYPE_CHECKING:
    from setpoint.client.client import Preconditions, PropagationPolicy, Selector
    from setpoint.client.protocols import ApiClient, IndexReader, Reader
    from setpoint.observability.metrics import Metrics

__all__ = [
    "ReconcileThreads",
    "SyncClient",
    "SyncContext",
    "SyncEventRecorder",
    "SyncReader",
    "is_blocking",
    "run_blocking",
]

T = TypeVar("T")
P = ParamSpec("P")

_STACK_LIMIT: Final = 12  # frames of a thread's stack shown in an overdue warning


def is_blocking(function: object) -> bool:
    """Whether a controller runs ``function`` in a thread: it is a plain ``def``, not async.

    Looks through ``functools.partial`` and decorators that set ``__wrapped__``
    (``functools.wraps``), as kopf does. A function or method (bound or not) that is not a
    coroutine function is blocking; so is an object whose class has a plain ``__call__``.
    Anything else (an ``async def``, an object with an async ``__call__``, a mock of one) is
    awaited on the loop.
    """
    target = function
    for _ in range(32):  # a chain of wrappers, not a cycle
        if isinstance(target, functools.partial):
            target = target.func
        elif getattr(target, "__wrapped__", None) is not None:
            target = target.__wrapped__  # type: ignore[attr-defined]
        else:
            break
    if inspect.iscoroutinefunction(target):
        return False
    if inspect.isfunction(target) or inspect.ismethod(target):
        return True
    call = vars(type(target)).get("__call__") if callable(target) else None
    return inspect.isfunction(call) and not inspect.iscoroutinefunction(call)


# -- the portal to the loop -------------------------------------------------------------------


async def _invoke(function: Callable[P, Awaitable[T]], *args: P.args, **kw: P.kwargs) -> T:
    """Call ``function`` on the loop (never in the thread) and await what it returns."""
    return await function(*args, **kw)


class _Portal:
    """One reconcile's way from its thread to the event loop, and its cancellation switch."""

    __slots__ = ("_cancelled", "_lock", "_loop", "_pending", "thread_id")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._cancelled: str | None = None
        self.thread_id: int | None = None
        """The ident of the thread running the function, while it runs."""

    @property
    def cancelled(self) -> bool:
        return self._cancelled is not None

    def call(
        self, what: str, function: Callable[P, Awaitable[T]], *args: P.args, **kw: P.kwargs
    ) -> T:
        """Run ``function(*args, **kw)`` on the loop and wait for its result in this thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            raise ControllerError(
                f"{what} was called on a thread that runs an event loop: it would wait for "
                "the loop it blocks (a deadlock on the manager's loop). The synchronous "
                "context is for plain 'def' reconcilers and cleanups, which the controller "
                "runs in threads; in async code use the Context and await its client"
            )
        with self._lock:
            if self._cancelled is not None:
                raise asyncio.CancelledError(f"{what}: {self._cancelled}")
            try:
                future = asyncio.run_coroutine_threadsafe(
                    _invoke(function, *args, **kw), self._loop
                )
            except RuntimeError as exc:  # the loop is closed: the manager has stopped
                raise asyncio.CancelledError(f"{what}: the event loop has stopped") from exc
            self._pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise asyncio.CancelledError(f"{what}: {self._cancelled or 'cancelled'}") from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def cancel(self, why: str) -> None:
        """Refuse further calls, and cancel the ones in flight (from any thread)."""
        with self._lock:
            if self._cancelled is None:
                self._cancelled = why
            pending = list(self._pending)
        for future in pending:
            future.cancel()


# -- the facades -------------------------------------------------------------------------------


class _SyncReads:
    """``get`` and ``list`` through the loop: what the reader and the client facades share."""

    __slots__ = ("_name", "_portal", "_source")

    def __init__(self, source: Reader, portal: _Portal, name: str) -> None:
        self._source = source
        self._portal = portal
        self._name = name

    def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object; raise ``NotFound`` if it does not exist."""
        return self._portal.call(
            f"{self._name}.get", self._source.get, kind, name, namespace=namespace
        )

    def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[T]:
        """List matching objects (iterable, with ``items`` and ``resource_version``)."""
        return self._portal.call(
            f"{self._name}.list",
            self._source.list,
            kind,
            namespace=namespace,
            labels=labels,
            fields=fields,
        )


class SyncReader(_SyncReads):
    """``ctx.reader`` for blocking code: the reconcile's cached reader, without ``await``.

    Each method calls the same method of the async reader on the event loop (so reads keep
    their read-after-write guarantee) and waits for it; errors (``NotFound``, ...) are raised
    in the calling thread as they are. Only for the thread a controller runs a plain ``def``
    reconciler or cleanup in (see the module docstring).
    """

    __slots__ = ("_reader",)

    def __init__(self, reader: IndexReader, portal: _Portal) -> None:
        super().__init__(reader, portal, "ctx.reader")
        self._reader = reader

    def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        """List the objects of ``kind`` whose index ``index`` includes ``value``."""
        return self._portal.call(
            "ctx.reader.list_by_index", self._reader.list_by_index, kind, index, value
        )


class SyncClient(_SyncReads):
    """``ctx.client`` for blocking code: the reconcile's tracking client, without ``await``.

    The methods of :class:`~setpoint.client.protocols.ApiClient`, each with the protocol's
    signature, run on the event loop through the reconcile's client (its writes are recorded
    for read-after-write, as in async code) while the calling thread waits. Not offered:
    ``watch`` (a stream belongs on the loop: use a ``watches`` source) and ``close`` (the
    controller owns the client). Errors are raised in the calling thread as they are.
    """

    __slots__ = ("_client",)

    def __init__(self, client: ApiClient, portal: _Portal) -> None:
        super().__init__(client, portal, "ctx.client")
        self._client = client

    @property
    def default_namespace(self) -> str:
        """The namespace calls use when none is given (the kubeconfig context's)."""
        return self._client.default_namespace

    def create(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Create an object; raise ``AlreadyExists`` if the name is taken."""
        return self._portal.call(
            "ctx.client.create",
            self._client.create,
            obj,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )

    def update(
        self,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace an object (or its status); raise ``Conflict`` if its resourceVersion is stale."""
        return self._portal.call(
            "ctx.client.update",
            self._client.update,
            obj,
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )

    def patch(
        self,
        kind: Kind[T],
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> T:
        """Patch an object with a JSON, merge, strategic-merge or apply patch."""
        return self._portal.call(
            "ctx.client.patch",
            self._client.patch,
            kind,
            name,
            patch,
            namespace=namespace,
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )

    def apply(
        self,
        obj: Obj,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Server-side apply an object under ``field_manager``."""
        return self._portal.call(
            "ctx.client.apply",
            self._client.apply,
            obj,
            field_manager=field_manager,
            force=force,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )

    def delete(
        self,
        kind: Kind[object],
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: PropagationPolicy | None = None,
        preconditions: Preconditions | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Delete an object; raise ``NotFound`` if it does not exist."""
        return self._portal.call(
            "ctx.client.delete",
            self._client.delete,
            kind,
            name,
            namespace=namespace,
            propagation_policy=propagation_policy,
            preconditions=preconditions,
            grace_period_seconds=grace_period_seconds,
            dry_run=dry_run,
        )

    def replace_status(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace the status of an object (optimistic on resourceVersion)."""
        return self._portal.call(
            "ctx.client.replace_status",
            self._client.replace_status,
            obj,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )

    def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """Plural, scope and subresources of a kind."""
        return self._portal.call("ctx.client.resource_info", self._client.resource_info, kind)

    def update_subresource(
        self,
        kind: Kind[object],
        name: str,
        subresource: str,
        body: JsonObject,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """PUT a subresource (``scale``, ``status``)."""
        return self._portal.call(
            "ctx.client.update_subresource",
            self._client.update_subresource,
            kind,
            name,
            subresource,
            body,
            namespace=namespace,
            dry_run=dry_run,
        )

    def set_scale(
        self, kind: Kind[object], name: str, replicas: int, *, namespace: str | None = None
    ) -> JsonObject:
        """Set ``spec.replicas`` through the ``scale`` subresource."""
        return self._portal.call(
            "ctx.client.set_scale",
            self._client.set_scale,
            kind,
            name,
            replicas,
            namespace=namespace,
        )


class SyncEventRecorder:
    """``ctx.recorder`` for blocking code: hands each Event to the loop, returns at once.

    The recorders queue Events on the event loop, which is not thread-safe; this one takes
    a copy of the object (the thread may change it afterwards) and schedules the real
    ``event`` call on the loop. Like every recorder it never raises.
    """

    __slots__ = ("_loop", "_recorder")

    def __init__(self, recorder: EventRecorder, loop: asyncio.AbstractEventLoop) -> None:
        self._recorder = recorder
        self._loop = loop

    def event(
        self, obj: Mapping[str, Any] | TypedObject, type: str, reason: str, message: str
    ) -> None:
        """Record an Event of ``type`` (``"Normal"`` or ``"Warning"``) about ``obj``."""
        copy: Mapping[str, Any] | TypedObject = (
            obj.to_object() if is_typed(obj) else copy_json(dict(obj))
        )
        with contextlib.suppress(RuntimeError):  # the loop is closed: the manager has stopped
            self._loop.call_soon_threadsafe(self._recorder.event, copy, type, reason, message)


@dataclass(frozen=True, slots=True)
class SyncContext:
    """Everything a plain ``def`` reconcile (or cleanup) receives besides the request.

    The fields of :class:`~setpoint.controller.reconcile.Context`, with a blocking
    :attr:`client` and :attr:`reader`; the async context itself is :attr:`async_context`.
    Built by the controller for every call, in the thread that runs it.
    """

    request: Request
    """The object to reconcile."""
    reconcile_id: str
    """A UUID naming this reconcile in logs."""
    log: Logger
    """The reconcile's logger (thread-safe: it writes through the standard library)."""
    client: SyncClient
    """The live (tracking) client, without ``await``."""
    reader: SyncReader
    """The cached reader with read-after-write, without ``await``."""
    recorder: SyncEventRecorder | None
    """Records Kubernetes Events, when the controller was built with a recorder."""
    controller: str
    """The controller's name."""
    gvk: GroupVersionKind | None
    """The kind the controller reconciles (its ``for_`` kind), when it has one."""
    cluster: str | None
    """The member cluster of a multi-cluster controller's reconcile, else ``None``."""
    async_context: Context
    """The reconcile's async :class:`~setpoint.controller.reconcile.Context`: what
    :meth:`run` hands to async helpers (``ctx.async_context.client``)."""
    _portal: _Portal = field(repr=False, compare=False)

    @classmethod
    def of(cls, ctx: Context, loop: asyncio.AbstractEventLoop) -> SyncContext:
        """The blocking view of ``ctx`` whose calls run on ``loop`` (a new portal each time)."""
        portal = _Portal(loop)
        recorder = ctx.recorder
        return cls(
            request=ctx.request,
            reconcile_id=ctx.reconcile_id,
            log=ctx.log,
            client=SyncClient(ctx.client, portal),
            reader=SyncReader(ctx.reader, portal),
            recorder=SyncEventRecorder(recorder, loop) if recorder is not None else None,
            controller=ctx.controller,
            gvk=ctx.gvk,
            cluster=ctx.cluster,
            async_context=ctx,
            _portal=portal,
        )

    @property
    def cancelled(self) -> bool:
        """Whether the reconcile was cancelled (its timeout passed, or the controller stops).

        From then on every call through the context raises ``asyncio.CancelledError``; a
        long loop that makes no such call checks this and returns (or raises) early.
        """
        return self._portal.cancelled

    def run(self, awaitable: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
        """Run an awaitable on the event loop and wait for its result in this thread.

        The way to the async helpers from blocking code::

            ctx.run(sp.update_status(ctx.async_context.client, tenant, mark_ready))

        A coroutine object is created in this thread but runs entirely on the loop.

        Raises:
            asyncio.CancelledError: the reconcile was cancelled (see :attr:`cancelled`).
            ControllerError: called on a thread that runs an event loop.

        """
        if self._portal.cancelled and inspect.iscoroutine(awaitable):
            awaitable.close()  # refused below before it ran: no "never awaited" warning

        async def wait() -> T:
            return await awaitable

        return self._portal.call("ctx.run", wait)


# -- the threads ---------------------------------------------------------------------------------


def _run_in_thread(
    portal: _Portal, function: Callable[..., Any], ctx: SyncContext, arg: Any
) -> tuple[bool, Any]:
    """What a pool thread runs: the function, its outcome captured (never raised)."""
    portal.thread_id = threading.get_ident()
    try:
        result = function(ctx, arg)
    except BaseException as exc:  # handed to the loop, which raises it
        return False, exc
    finally:
        portal.thread_id = None
    if inspect.iscoroutine(result):  # a plain def that hands back async work
        result.close()
        name = getattr(function, "__qualname__", function)
        return False, TypeError(
            f"{name!r} is a plain 'def' (run in a thread) but returned a coroutine: declare it "
            "'async def' to run on the event loop, or call the async code with ctx.run(...)"
        )
    return True, result


def _thread_stack(thread_id: int | None) -> str:
    """The innermost frames of a running thread, ``file:line in function``, innermost last."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return ""
    stack = traceback.extract_stack(frame)[-_STACK_LIMIT:]
    return " <- ".join(
        f"{entry.filename.rsplit('/', 1)[-1]}:{entry.lineno} in {entry.name}"
        for entry in reversed(stack)
    )


_LEFT_RUNNING: dict[tuple[str, Request], concurrent.futures.Future[Any]] = {}
"""Threads a stopping controller left running, by (controller name, key): a controller of
the same name started later in the process (a new leader term, a cluster that joins again)
waits for them before it runs that key."""
_LEFT_LOCK = threading.Lock()


class ReconcileThreads:
    """The thread pool of one controller's blocking reconciles and cleanups.

    ``size`` threads (the controller's ``max_concurrent_reconciles``), created when first
    needed. :meth:`call` is what a worker awaits instead of an async reconciler; see the
    module docstring for the guarantees and what cannot be interrupted.
    """

    def __init__(
        self,
        controller: str,
        size: int,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self._controller = controller
        self._size = size
        self._metrics = metrics
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closing = False
        self._overdue = 0
        self._lock = threading.Lock()  # the overdue count changes on pool threads too

    @property
    def overdue(self) -> int:
        """Threads still running whose reconcile was cancelled (timeout, deadline, stop)."""
        return self._overdue

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            pool = self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._size, thread_name_prefix=f"setpoint-{self._controller}"
            )
        return pool

    async def call(
        self, function: Callable[[SyncContext, Any], T], ctx: Context, arg: Any, *, limit: str
    ) -> T:
        """Run ``function(SyncContext.of(ctx), arg)`` in a pool thread and await its outcome.

        ``limit`` names what cancels it (``"reconcile_timeout (300s)"``) for the log line
        an overdue thread gets. Cancelling the awaiting task cancels the reconcile: its
        facade refuses further calls, and the task waits for the thread to end (the key
        stays held) unless the controller is stopping (:meth:`close`); then it re-raises
        the cancellation. Whatever the function raises is raised here, in the awaiting task.
        """
        left = _LEFT_RUNNING.get((self._controller, ctx.request))
        if left is not None and not left.done():
            ctx.log.warning(
                "Waiting for the blocking reconcile thread an earlier run of this controller "
                "left running for this key (no key is reconciled by two threads at once)"
            )
            await asyncio.wait({asyncio.wrap_future(left)})
        loop = asyncio.get_running_loop()
        sync_ctx = SyncContext.of(ctx, loop)
        portal = sync_ctx._portal
        context = contextvars.copy_context()  # the reconcile's: read marks, tracing, ...
        future = self._executor().submit(
            context.run, _run_in_thread, portal, function, sync_ctx, arg
        )
        try:
            ok, value = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            portal.cancel(f"the reconcile was cancelled ({limit} passed, or the controller stops)")
            if future.cancel() or future.done():
                raise  # it never started, or just ended: nothing runs on
            await self._outlive(future, portal, ctx, limit)
            raise
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    async def _outlive(
        self, future: concurrent.futures.Future[Any], portal: _Portal, ctx: Context, limit: str
    ) -> None:
        """Report a thread that runs on after its reconcile was cancelled; wait unless closing."""
        log = ctx.log
        started = time.monotonic()
        with self._lock:
            self._overdue += 1
        metrics = self._metrics
        if metrics is not None:
            metrics.reconcile_threads_overdue.labels(self._controller).inc()
            metrics.reconcile_threads_overdue_total.labels(self._controller).inc()
        stopping = self._closing
        log.warning(
            "Blocking reconcile still running in its thread after it was cancelled; "
            + (
                "the controller is stopping and leaves it to finish"
                if stopping
                else "the key stays held until the thread ends (Python cannot interrupt it)"
            ),
            limit=limit,
            thread_stack=_thread_stack(portal.thread_id),
        )

        def ended(_: concurrent.futures.Future[Any]) -> None:
            with self._lock:
                self._overdue -= 1
            if metrics is not None:
                metrics.reconcile_threads_overdue.labels(self._controller).dec()
            log.warning(
                "Blocking reconcile thread ended after its reconcile was cancelled",
                seconds_after=round(time.monotonic() - started, 3),
            )

        future.add_done_callback(ended)
        while not future.done() and not self._closing:
            try:
                await asyncio.wait({asyncio.wrap_future(future)})
            except asyncio.CancelledError:
                if self._closing:
                    break
                # Any other cancellation: the reconcile is cancelled already; keep the key.
        if not future.done():  # left running by a stopping controller: fence its key
            slot = (self._controller, ctx.request)
            with _LEFT_LOCK:
                _LEFT_RUNNING[slot] = future

            def forget(done: concurrent.futures.Future[Any]) -> None:
                with _LEFT_LOCK:
                    if _LEFT_RUNNING.get(slot) is done:
                        del _LEFT_RUNNING[slot]

            future.add_done_callback(forget)

    def close(self) -> None:
        """The controller is stopping: cancelled reconciles stop waiting for their threads."""
        self._closing = True

    def shutdown(self) -> None:
        """Release the pool (threads still running finish on their own; nothing new starts)."""
        self._closing = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


async def run_blocking(function: Callable[[SyncContext, Any], T], ctx: Context, arg: Any) -> T:
    """Run a plain ``def`` reconciler or cleanup as a controller does, for a unit test.

    ``function(SyncContext.of(ctx), arg)`` runs in a new thread (``arg`` is the request,
    or the object for a cleanup) while the calling loop serves its facade calls, so a test
    can drive a blocking reconciler with a :class:`~setpoint.testing.FakeClient` context::

        result = await run_blocking(reconcile, ctx, request)
    """
    threads = ReconcileThreads("test", 1)
    try:
        return await threads.call(function, ctx, arg, limit="the test's own timeout")
    finally:
        threads.shutdown()
