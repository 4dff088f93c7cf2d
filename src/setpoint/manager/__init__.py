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

from setpoint.manager.builder import ManagedBuilder
from setpoint.manager.clusters import ClusterBuilder, ClusterSet, ClusterSetOptions, MemberStatus
from setpoint.manager.errors import (
    CacheSyncTimeout,
    DuplicateCheckError,
    LeaderElectionLost,
    ManagerError,
    ManagerStateError,
    RunnableFailed,
    ShardLeaseLost,
    ShutdownIncomplete,
)
from setpoint.manager.healthz import Check, HealthChecks
from setpoint.manager.leaderelection import LeaderElector, default_identity
from setpoint.manager.manager import Manager
from setpoint.manager.options import (
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

__all__ = [
    "CacheFactory",
    "CacheLike",
    "CacheSyncTimeout",
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
    "default_identity",
    "default_new_cache",
]
