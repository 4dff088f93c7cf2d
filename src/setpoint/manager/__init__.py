"""The manager: runnable lifecycle, leader election, probes, metrics server and Events.

::

    from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions

    manager = Manager.from_environment(ManagerOptions(
        leader_election=LeaderElectionOptions(name="tenant-operator"),
    ))
    manager.add(controller)
    await manager.run()

Sharding (``ManagerOptions.sharding``, decision 0011) is in ``setpoint.manager.sharding``,
``setpoint.manager.shardmember`` and ``setpoint.manager.sharder``. See
``docs/guide/manager.md`` for the lifecycle, the timing rules of leader election and the
probe and metrics endpoints. The HTTP server they are served by, and its request and
response types, are :mod:`setpoint.server`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from setpoint._lazy import lazy_module

if TYPE_CHECKING:
    from setpoint.manager.builder import ManagedBuilder
    from setpoint.manager.clusters import ClusterBuilder, ClusterSet, MemberStatus
    from setpoint.manager.errors import (
        DuplicateCheckError,
        LeaderElectionLost,
        ManagerError,
        ManagerStateError,
        RunnableFailed,
        ShardLeaseLost,
        ShutdownIncomplete,
        StartupSyncTimeout,
    )
    from setpoint.manager.healthz import Check, HealthChecks
    from setpoint.manager.leaderelection import LeaderElector, default_identity
    from setpoint.manager.manager import Manager
    from setpoint.manager.options import (
        ClusterSetOptions,
        LeaderElectionOptions,
        LeadershipLossPolicy,
        ManagerOptions,
    )
    from setpoint.manager.resourcelock import (
        LeaderElectionRecord,
        LeaseClient,
        LeaseLock,
        LockNotInitialized,
        ResourceLock,
    )
    from setpoint.manager.sharding import HashRing, ShardingOptions, ShardKey
    from setpoint.manager.sharedcache import CacheFactory, CacheLike, default_new_cache

# Names load on first use (PEP 562): an operator that builds a Manager must not pay for
# leader election, sharding, member clusters or the metrics server's authentication until
# its options ask for them (the manager imports those modules where it uses them).
_EXPORTS: dict[str, str] = {
    "CacheFactory": "setpoint.manager.sharedcache",
    "CacheLike": "setpoint.manager.sharedcache",
    "Check": "setpoint.manager.healthz",
    "ClusterBuilder": "setpoint.manager.clusters",
    "ClusterSet": "setpoint.manager.clusters",
    "ClusterSetOptions": "setpoint.manager.options",
    "DuplicateCheckError": "setpoint.manager.errors",
    "HashRing": "setpoint.manager.sharding",
    "HealthChecks": "setpoint.manager.healthz",
    "LeaderElectionLost": "setpoint.manager.errors",
    "LeaderElectionOptions": "setpoint.manager.options",
    "LeaderElectionRecord": "setpoint.manager.resourcelock",
    "LeaderElector": "setpoint.manager.leaderelection",
    "LeadershipLossPolicy": "setpoint.manager.options",
    "LeaseClient": "setpoint.manager.resourcelock",
    "LeaseLock": "setpoint.manager.resourcelock",
    "LockNotInitialized": "setpoint.manager.resourcelock",
    "ManagedBuilder": "setpoint.manager.builder",
    "Manager": "setpoint.manager.manager",
    "ManagerError": "setpoint.manager.errors",
    "ManagerOptions": "setpoint.manager.options",
    "ManagerStateError": "setpoint.manager.errors",
    "MemberStatus": "setpoint.manager.clusters",
    "ResourceLock": "setpoint.manager.resourcelock",
    "RunnableFailed": "setpoint.manager.errors",
    "ShardKey": "setpoint.manager.sharding",
    "ShardLeaseLost": "setpoint.manager.errors",
    "ShardingOptions": "setpoint.manager.sharding",
    "ShutdownIncomplete": "setpoint.manager.errors",
    "StartupSyncTimeout": "setpoint.manager.errors",
    "default_identity": "setpoint.manager.leaderelection",
    "default_new_cache": "setpoint.manager.sharedcache",
}


__getattr__, __dir__ = lazy_module("setpoint.manager", globals(), _EXPORTS)


__all__ = [
    "CacheFactory",
    "CacheLike",
    "Check",
    "ClusterBuilder",
    "ClusterSet",
    "ClusterSetOptions",
    "DuplicateCheckError",
    "HashRing",
    "HealthChecks",
    "LeaderElectionLost",
    "LeaderElectionOptions",
    "LeaderElectionRecord",
    "LeaderElector",
    "LeadershipLossPolicy",
    "LeaseClient",
    "LeaseLock",
    "LockNotInitialized",
    "ManagedBuilder",
    "Manager",
    "ManagerError",
    "ManagerOptions",
    "ManagerStateError",
    "MemberStatus",
    "ResourceLock",
    "RunnableFailed",
    "ShardKey",
    "ShardLeaseLost",
    "ShardingOptions",
    "ShutdownIncomplete",
    "StartupSyncTimeout",
    "default_identity",
    "default_new_cache",
]
