"""Fakes shared by the manager's unit tests: runnables, caches, an HTTP server, a lease store.

The client is the public :class:`setpoint.testing.FakeClient`.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from setpoint.api.clock import ManualClock
from setpoint.api.runnable import RunnableGroup
from setpoint.manager import LeaderElectionRecord, LockNotInitialized
from setpoint.server import BindAddress, HttpHandler, HttpServerOptions
from tests._support.virtual_time import settle


async def advance(clock: ManualClock, seconds: float, *, step: float = 0.05) -> None:
    """Move a manual clock forward in small steps, letting tasks run after each one."""
    start = clock.now()
    steps = max(1, math.ceil(seconds / step - 1e-9))
    for i in range(1, steps + 1):
        # Computed from the start, not accumulated, so the last step lands exactly on target.
        clock.advance_to(start + seconds * i / steps)
        await settle()


class FakeRunnable:
    """A runnable that logs ``start:<name>`` / ``stop:<name>`` into a shared list."""

    def __init__(
        self,
        name: str,
        group: RunnableGroup,
        log: list[str],
        *,
        leader: bool = False,
        start_error: Exception | None = None,
        stop_hangs: bool = False,
        start_gate: asyncio.Event | None = None,
    ) -> None:
        self._name = name
        self._group = group
        self._leader = leader
        self.log = log
        self.start_error = start_error
        self.stop_hangs = stop_hangs
        self.start_gate = start_gate
        self.error: BaseException | None = None
        self.stop_timeouts: list[float] = []
        self.running = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def group(self) -> RunnableGroup:
        return self._group

    @property
    def needs_leader_election(self) -> bool:
        return self._leader

    async def start(self) -> None:
        self.log.append(f"start:{self._name}")
        if self.start_gate is not None:
            await self.start_gate.wait()
        if self.start_error is not None:
            raise self.start_error
        self.running = True

    async def stop(self, timeout: float) -> None:
        self.log.append(f"stop:{self._name}")
        self.stop_timeouts.append(timeout)
        if self.stop_hangs:
            await asyncio.Event().wait()
        self.running = False

    def failure(self) -> BaseException | None:
        return self.error


class FakeCache(FakeRunnable):
    """A cache-like runnable whose sync the test controls."""

    def __init__(self, name: str, log: list[str], *, sync_error: Exception | None = None) -> None:
        super().__init__(name, RunnableGroup.CACHES, log)
        self.synced_event = asyncio.Event()
        self.sync_error = sync_error
        self.sync_timeouts: list[float] = []

    @property
    def synced(self) -> bool:
        return self.synced_event.is_set()

    async def wait_for_sync(self, timeout: float) -> None:
        self.sync_timeouts.append(timeout)
        if self.sync_error is not None:
            raise self.sync_error
        async with asyncio.timeout(timeout):
            await self.synced_event.wait()
        self.log.append(f"synced:{self.name}")


class FakeHttpServer:
    """An HTTP server seam that binds nothing; tests call ``handler`` directly."""

    def __init__(
        self,
        name: str,
        address: BindAddress,
        handler: HttpHandler,
        *,
        options: HttpServerOptions | None = None,
    ) -> None:
        self._name = name
        self.bind = address
        self.handler = handler
        self.options = options
        self._address: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def group(self) -> RunnableGroup:
        return RunnableGroup.SERVERS

    @property
    def needs_leader_election(self) -> bool:
        return False

    @property
    def address(self) -> tuple[str, int] | None:
        return self._address

    async def start(self) -> None:
        self._address = (self.bind.host or "0.0.0.0", self.bind.port or 12345)

    async def stop(self, timeout: float) -> None:
        self._address = None

    def failure(self) -> BaseException | None:
        return None


class ConflictError(Exception):
    """The store's version moved on since this lock saw it."""

    code = 409


@dataclass
class LeaseStore:
    """One lease shared by several :class:`MemoryLock` candidates, with versions."""

    record: LeaderElectionRecord | None = None
    version: int = 0
    fail_with: Exception | None = None
    hang: bool = False
    writes: list[LeaderElectionRecord] = field(default_factory=list)

    async def _gate(self) -> None:
        if self.hang:
            await asyncio.Event().wait()
        if self.fail_with is not None:
            raise self.fail_with


class MemoryLock:
    """A ResourceLock over a :class:`LeaseStore`, with resourceVersion-style concurrency."""

    def __init__(self, store: LeaseStore, identity: str) -> None:
        self.store = store
        self._identity = identity
        self._seen: int | None = None
        self.events: list[str] = []

    @property
    def identity(self) -> str:
        return self._identity

    def describe(self) -> str:
        return "Lease test/lock"

    async def get(self) -> LeaderElectionRecord | None:
        await self.store._gate()
        if self.store.record is None:
            return None
        self._seen = self.store.version
        return self.store.record

    async def create(self, record: LeaderElectionRecord) -> None:
        await self.store._gate()
        if self.store.record is not None:
            raise ConflictError("already exists")
        self._write(record)

    async def update(self, record: LeaderElectionRecord) -> None:
        await self.store._gate()
        if self._seen is None:
            raise LockNotInitialized("get first")
        if self._seen != self.store.version:
            raise ConflictError(f"version {self._seen} is stale ({self.store.version})")
        self._write(record)

    def _write(self, record: LeaderElectionRecord) -> None:
        self.store.record = record
        self.store.version += 1
        self.store.writes.append(record)
        self._seen = self.store.version

    def record_event(self, message: str) -> None:
        self.events.append(message)
