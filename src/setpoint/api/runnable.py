"""The lifecycle protocol of everything a manager runs.

As in controller-runtime's ``pkg/manager/runnable_group.go``, the manager only
knows runnables. Each declares which group it belongs to (servers, webhooks,
caches, controllers, or other) and whether it needs leadership; the manager
starts the groups in that order and stops them in reverse.

The protocol lives in ``api`` (pure typing, no I/O) so that the cache, the
controllers, the webhook server and the manager can all use it while layers
point only downward.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol, runtime_checkable

__all__ = ["Runnable", "RunnableGroup"]


class RunnableGroup(IntEnum):
    """Start order of the manager's groups; stop order is the reverse."""

    SERVERS = 0
    """Probe and metrics HTTP servers: up first so a starting process is observable."""
    WEBHOOKS = 1
    """Admission and conversion webhooks: the API server may call them while caches sync."""
    CACHES = 2
    """Informers: the manager waits for them to sync before starting controllers."""
    OTHERS = 3
    """Anything else, e.g. a user's background task."""
    CONTROLLERS = 4
    """Controllers: started last, stopped first, so they never run on an unsynced cache."""


@runtime_checkable
class Runnable(Protocol):
    """Something with a start and a graceful stop that a manager runs.

    Expected flow:
        ``await start()`` returns once the runnable is running (a server bound,
        informers listing, workers started); it raises if it cannot start.
        The runnable then works in background tasks it owns. ``await
        stop(timeout)`` asks it to finish and waits at most ``timeout`` seconds
        (draining in-flight work where that applies), then cancels what is left.

    Guarantees expected of implementations:
        ``stop`` is idempotent and safe to call on a runnable that never
        started or failed half-way. A runnable whose background work dies
        unexpectedly reports it through ``failure`` so the manager can shut
        down rather than limp along.
    """

    @property
    def name(self) -> str:
        """A short name for logs and errors (``"cache"``, ``"controller/tenant"``)."""
        ...

    @property
    def group(self) -> RunnableGroup:
        """Which start group this runnable belongs to."""
        ...

    @property
    def needs_leader_election(self) -> bool:
        """Whether it may only run while this process holds the leader lease."""
        ...

    async def start(self) -> None:
        """Start background work and return once running."""
        ...

    async def stop(self, timeout: float) -> None:
        """Stop gracefully within ``timeout`` seconds, then cancel what remains."""
        ...

    def failure(self) -> BaseException | None:
        """The error that ended the background work unexpectedly, or ``None``."""
        ...
