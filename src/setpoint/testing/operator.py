"""Run an operator in-process for a test, exactly as ``setpoint run`` would set it up.

::

    async with run_operator(tenants.setup, kubeconfig=kubeconfig_path) as op:
        await k8s.create(tenant)
        await op.wait_idle()
        assert op.metrics.value("controller_runtime_reconcile_errors_total") == 0

With ``client=FakeClient(...)`` instead of a kubeconfig, the same operator runs in
memory (a unit test of the whole loop, without a control plane)::

    fake = FakeClient(resources=[Tenant])
    async with run_operator(tenants.setup, client=fake) as op:
        await fake.create(tenant)
        await op.wait_idle()

The operator's ``setup(manager)`` registers its controllers on a fresh
:class:`~setpoint.manager.Manager` with its own client, a private metrics
registry, no HTTP servers and no signal handlers; the manager runs in a task
until the block ends, then stops gracefully. Testing against the real control
plane from an operator's first day should be this short.

**One test, one namespace.** In a test that uses the pytest plugin's ``namespace``
fixture, the operator watches only that namespace (cluster-scoped kinds are not
affected), so objects earlier tests left behind, in namespaces still ``Terminating``,
never reach its reconciler. An operator that works across namespaces says so:
``run_operator(..., namespaces=())`` watches all of them, ``namespaces=("a", "b")``
those.

**Time on a test's terms.** With ``clock=ManualClock()``, the work queue's timers
(``Result(requeue_after=...)``, retry backoff) and the reconcile timeout run on that
clock, and :meth:`RunningOperator.advance` moves it: a periodic reconcile is tested
without waiting for its period::

    async with run_operator(setup, client=fake, clock=ManualClock()) as op:
        await fake.create(widget)
        await op.wait_idle()
        await op.advance(60)        # each requeue due within the minute runs, in order
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from setpoint.api.clock import Clock, ManualClock
from setpoint.cache.cache import Cache, CacheOptions
from setpoint.client.client import Client
from setpoint.client.kubeconfig import load_kubeconfig
from setpoint.client.protocols import ApiClient
from setpoint.controller.controller import Controller
from setpoint.crd.conversion import CONVERT_PATH, WebhookClientConfig
from setpoint.manager.manager import Manager
from setpoint.manager.options import LeaderElectionOptions, ManagerOptions
from setpoint.manager.sharedcache import default_new_cache
from setpoint.observability.metrics import Metrics
from setpoint.testing._test_scope import current_test_namespace
from setpoint.testing.webhook import serving_certificate
from setpoint.webhook.server import StaticCertificate, WebhookServerOptions

__all__ = ["RunningOperator", "run_operator"]


@dataclass
class RunningOperator:
    """An operator running in this process; see :func:`run_operator`."""

    manager: Manager
    """The manager it runs in."""
    metrics: Metrics
    """Its private metrics (``metrics.value(name, **labels)`` reads a sample)."""
    setup_result: Any
    """Whatever ``setup(manager)`` returned (a reconciler, settings, ...)."""
    task: asyncio.Task[None]
    """The task running ``manager.run()``."""
    webhook_ca: bytes | None = None
    """The CA (PEM) of the loopback webhook server's certificate, when ``run_operator``
    configured one (see :meth:`webhook_client_config`)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces the operator's cache watches; ``()``: all of them."""
    clock: Clock | None = None
    """The clock the manager and its controllers run on; :meth:`advance` moves a
    :class:`~setpoint.api.clock.ManualClock`."""

    def webhook_client_config(self, path: str = CONVERT_PATH) -> WebhookClientConfig:
        """How the API server reaches this operator's webhook ``path`` (URL and caBundle).

        Generate the CRD with it (``crd_for(..., webhook=op.webhook_client_config())``) so
        the local control plane calls the operator's conversion webhook.

        Raises:
            RuntimeError: the operator registered no webhooks, or uses its own certificate.

        """
        server = self.manager.webhook_server if self.webhook_ca is not None else None
        if server is None or server.address is None:
            raise RuntimeError(
                "this operator serves no webhooks here: its setup registered none, or "
                "ManagerOptions.webhook_server was given (then build the config yourself)"
            )
        return WebhookClientConfig(url=server.url(path), ca_bundle=self.webhook_ca)

    @property
    def controllers(self) -> list[Controller]:
        """The controllers ``setup`` registered."""
        return [r for r in self.manager.runnables if isinstance(r, Controller)]

    async def wait_idle(self, *, timeout: float = 30.0, settle: float = 0.5) -> None:
        """Wait until every controller has been idle for ``settle`` seconds.

        See :meth:`Controller.wait_idle <setpoint.controller.Controller.wait_idle>`:
        after this, a change a test makes is handled by the watch it means to test, not
        by a reconcile still queued from the operator's own writes.
        """
        self._check_running()
        await asyncio.gather(
            *(c.wait_idle(timeout=timeout, settle=settle) for c in self.controllers)
        )
        self._check_running()

    async def advance(self, seconds: float, *, timeout: float = 30.0, settle: float = 0.05) -> None:
        """Move the operator's :class:`~setpoint.api.clock.ManualClock` ``seconds`` forward.

        Time moves from one due timer to the next, as if it passed: each timer due within
        ``seconds`` fires at its deadline (a ``Result(requeue_after=...)`` requeue, a retry's
        backoff, a reconcile timeout), and the reconciles it starts run to the end
        (:meth:`wait_idle` with ``settle``) before time moves on, so a requeue they ask for
        fires in the same call when it falls within ``seconds``. A reconcile every 30 s
        thus runs twice in ``advance(60)``. Each step waits ``settle`` real seconds for
        quiet.

        Raises:
            TypeError: ``run_operator`` was not given ``clock=ManualClock()``.
            ValueError: ``seconds`` is negative.
            TimeoutError: a step did not become idle within ``timeout``.

        """
        clock = self.clock
        if not isinstance(clock, ManualClock):
            raise TypeError(
                "RunningOperator.advance() moves a ManualClock: start the operator with "
                "run_operator(..., clock=ManualClock())"
            )
        if seconds < 0:
            raise ValueError(f"advance({seconds}): time only moves forward")
        target = clock.now() + seconds
        while (due := clock.next_deadline) is not None and due <= target:
            clock.advance_to(max(due, clock.now()))
            await self.wait_idle(timeout=timeout, settle=settle)
        clock.advance_to(target)
        await self.wait_idle(timeout=timeout, settle=settle)

    def _check_running(self) -> None:
        if self.task.done():
            error = self.task.exception() if not self.task.cancelled() else None
            raise RuntimeError(f"the operator's manager stopped: {error!r}") from error


@contextlib.asynccontextmanager
async def run_operator(
    setup: Callable[[Manager], Any],
    *,
    kubeconfig: str | Path | None = None,
    client: ApiClient | None = None,
    leader_election: LeaderElectionOptions | None = None,
    options: ManagerOptions | None = None,
    namespaces: Sequence[str] | None = None,
    clock: Clock | None = None,
    start_timeout: float = 60.0,
    stop_timeout: float = 60.0,
) -> AsyncIterator[RunningOperator]:
    """Run ``setup``'s controllers in a manager until the ``async with`` block ends.

    Args:
        setup: The operator's ``setup(manager)`` (sync or async), as ``setpoint run``
            calls it.
        kubeconfig: The kubeconfig to connect with (the ``kubeconfig_path`` fixture, or
            one for a restricted user). The operator gets a client of its own, closed
            at the end.
        client: Instead of ``kubeconfig``, the client to run on: a
            :class:`~setpoint.testing.FakeClient` runs the whole operator (cache, work
            queue, controllers, finalizers) in memory, in milliseconds; it is not closed.
        leader_election: Campaign for a Lease first (``None``: run as the only replica).
        options: Manager options to start from; metrics, servers and signal handling
            are always overridden for test isolation. Unless ``options`` sets
            ``webhook_server``, the webhook server (if ``setup`` registers webhooks) listens
            on a free loopback port with a certificate from a fresh in-memory CA
            (``RunningOperator.webhook_ca``).
        namespaces: The namespaces the operator's cache watches (cluster-scoped kinds are
            not affected). ``None`` (the default): the test's own namespace when the test
            uses the pytest plugin's ``namespace`` fixture (directly or through another
            fixture), else all namespaces. ``()``: all namespaces, for an operator that
            works across them. Ignored, when ``None``, if ``options`` sets its own
            ``new_cache``.
        clock: Where the manager and its controllers read time and set timers: work queue
            requeues and backoff, reconcile timeouts, leader election, the shutdown budget.
            ``None``: ``options.clock`` (the event loop's clock by default). Pass a
            :class:`~setpoint.api.clock.ManualClock` and move it with
            :meth:`RunningOperator.advance`; nothing that waits on it happens until then
            (a failed reconcile's retry included).
        start_timeout: Seconds to wait for caches to sync and, with leader election,
            to be elected.
        stop_timeout: Seconds to wait for the graceful stop.

    Raises:
        TypeError: neither or both of ``kubeconfig`` and ``client`` were given, or both
            ``namespaces`` and ``options.new_cache``.
        RuntimeError: the manager stopped on its own (its error is the cause).

    """
    if (kubeconfig is None) == (client is None):
        raise TypeError(
            "run_operator() needs exactly one of kubeconfig= (a real API server, e.g. the "
            "kubeconfig_path fixture) and client= (e.g. a FakeClient)"
        )
    metrics = Metrics.isolated()
    base = options or ManagerOptions()
    watched, new_cache = _scope(namespaces, base)
    if clock is not None:
        base = dataclasses.replace(base, clock=clock)
    webhook_ca: bytes | None = None
    webhook_server = base.webhook_server
    if webhook_server == WebhookServerOptions():
        ca, pair = serving_certificate()
        webhook_ca = ca.cert_pem
        webhook_server = WebhookServerOptions(
            bind_address="127.0.0.1:0", certificate=StaticCertificate(pair)
        )
    opts = dataclasses.replace(
        base,
        metrics=metrics,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        handle_signals=False,
        leader_election=leader_election,
        webhook_server=webhook_server,
        new_cache=new_cache,
    )
    owned = Client(load_kubeconfig(str(kubeconfig))) if kubeconfig is not None else None
    if owned is not None:
        client = owned
    assert client is not None
    manager = Manager(client, opts)
    try:
        result = setup(manager)
        if inspect.isawaitable(result):
            result = await result
        task = asyncio.create_task(manager.run(), name="setpoint-test-operator")
        running = RunningOperator(manager, metrics, result, task, webhook_ca, watched, opts.clock)
        try:
            waiter = asyncio.ensure_future(manager.wait_elected(timeout=start_timeout))
            done, _ = await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                waiter.cancel()
                running._check_running()
            await waiter
            yield running
        finally:
            manager.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, stop_timeout)
    finally:
        if owned is not None:
            await owned.close()


def _scope(
    namespaces: Sequence[str] | None, options: ManagerOptions
) -> tuple[tuple[str, ...], Any]:
    """The namespaces the test's operator watches, and the cache factory that watches them."""
    custom = options.new_cache is not default_new_cache
    if namespaces is None:
        if custom:
            return (), options.new_cache
        test = current_test_namespace()
        namespaces = (test,) if test is not None else ()
    elif custom:
        raise TypeError(
            "run_operator(): pass either namespaces= or ManagerOptions.new_cache (a cache "
            "factory of your own chooses its namespaces itself), not both"
        )
    if isinstance(namespaces, str):
        raise TypeError(
            f"run_operator(namespaces={namespaces!r}): pass a sequence of names, e.g. "
            f"namespaces=({namespaces!r},)"
        )
    watched = tuple(namespaces)
    if not watched:
        return (), default_new_cache

    def new_cache(client: ApiClient) -> Cache:
        return Cache(client, options=CacheOptions(namespaces=watched))

    return watched, new_cache
