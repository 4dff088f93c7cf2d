"""The errors a :class:`~setpoint.manager.Manager` raises.

``Manager.run()`` returns ``None`` after a clean shutdown (a signal or ``stop()``) and raises
one of these otherwise, always after the graceful shutdown has run. Each names the runnable or
lease involved and says what to check.
"""

from __future__ import annotations

from setpoint.api.errors import SetpointError
from setpoint.cache import errors as _cache_errors

__all__ = [
    "DuplicateCheckError",
    "LeaderElectionLost",
    "ManagerError",
    "ManagerStateError",
    "RunnableFailed",
    "ShardLeaseLost",
    "ShutdownIncomplete",
    "StartupSyncTimeout",
]


class ManagerError(SetpointError):
    """Base of every error ``Manager.run()`` raises; catch it to handle any of them."""


class ManagerStateError(ManagerError):
    """The manager was used out of order: run twice, or configured after it finished."""


class RunnableFailed(ManagerError):
    """A runnable could not start, or its background work ended with an error.

    The manager shut down because of it. The original exception is ``__cause__``.
    """

    __module__ = "setpoint"

    def __init__(self, runnable: str, message: str) -> None:
        super().__init__(message)
        self.runnable = runnable
        """The failed runnable's name."""


class StartupSyncTimeout(RunnableFailed, _cache_errors.CacheSyncTimeout):
    """A cache the manager started did not sync in ``ManagerOptions.cache_sync_timeout``.

    A :class:`RunnableFailed` (it names the cache runnable) and a
    :class:`setpoint.CacheSyncTimeout` (what the cache itself raises), so one ``except``
    clause catches a sync timeout whether the cache or the manager reported it.

    Usually RBAC (the service account may not list/watch one of the kinds), a CRD that is not
    installed, or an API server too slow for a very large initial list.
    """

    def __init__(self, runnable: str, message: str, *, timeout: float) -> None:
        super().__init__(runnable, message)
        self.timeout = timeout
        """The timeout, in seconds, that ran out."""


class LeaderElectionLost(ManagerError):
    """The leader lease was lost; leader-only work was stopped at once.

    Raised by ``run()`` under ``LeadershipLossPolicy.FAIL`` (the default): the process should
    exit and be restarted, as controller-runtime's managers do.
    """

    __module__ = "setpoint"

    def __init__(self, lease: str, identity: str) -> None:
        super().__init__(
            f"lost leadership of {lease} (identity {identity!r}): the lease could not be renewed "
            "before the renew deadline, or another candidate holds it. Leader-only runnables "
            "were stopped immediately. Check the API server's reachability and latency from "
            "this pod, and that the lease timings leave room for slow requests"
        )
        self.lease = lease
        """The lock's description (``Lease namespace/name``)."""
        self.identity = identity
        """This candidate's identity."""


class ShardLeaseLost(LeaderElectionLost):
    """The shard Lease of this replica was lost; its sharded controllers were stopped at once.

    Raised by ``run()`` under ``LeadershipLossPolicy.FAIL`` (the default), like
    :class:`LeaderElectionLost` (which it is). The sharder moves the shard's objects to the
    other replicas once the Lease has expired; restart the process to rejoin the ring.
    """

    __module__ = "setpoint"

    def __init__(self, lease: str, identity: str) -> None:
        ManagerError.__init__(
            self,
            f"lost shard {lease} (shard {identity!r}): the Lease could not be renewed before "
            "the renew deadline, or the sharder took it over because it had expired. The "
            "sharded controllers were stopped immediately; the other replicas take over this "
            "shard's objects. Check the API server's reachability and latency from this pod, "
            "and ShardingOptions' timings",
        )
        self.lease = lease
        self.identity = identity


class ShutdownIncomplete(ManagerError):
    """Some runnables did not stop cleanly within the graceful shutdown timeout.

    ``problems`` lists ``(runnable name, what went wrong)``. Raised only when the run otherwise
    ended cleanly; after another error, these problems are logged and that error is raised.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        listed = "; ".join(f"{name}: {problem}" for name, problem in problems)
        super().__init__(
            f"shutdown was not clean: {listed}. A runnable's stop(timeout) must return within "
            "its timeout; raise ManagerOptions.graceful_shutdown_timeout if draining takes longer"
        )
        self.problems = problems
        """``(runnable name, problem)`` pairs."""


class DuplicateCheckError(SetpointError, ValueError):
    """A health or readiness check with this name is already registered.

    Checks are never silently replaced: two components registering the same name would
    otherwise hide one of them from the probe.
    """
