"""One root for every error setpoint raises on purpose: :class:`SetpointError`.

``except setpoint.SetpointError`` catches anything setpoint raised deliberately (not a bug
in it, not a ``KeyboardInterrupt``). Every error also keeps the built-in base that says
what kind of failure it is (``ValueError`` for bad input, ``TimeoutError`` for a wait that
ran out, ...), so code catching those keeps working. Errors exported at the top level show
their public path in tracebacks and reprs (``setpoint.NotFound``, not
``setpoint.client.errors.NotFound``).

The tree (built-in bases in brackets; ``-`` marks where the error lives)::

    SetpointError
    ├── DeclarationError [TypeError]        - api: a resource or model declaration
    ├── ConditionError [ValueError]         - api: a condition the server would refuse
    ├── OwnerError [ValueError]             - api: owner references
    │   ├── AlreadyOwned                       another controller owns it
    │   ├── NotAdopted                         exists without a controller; not adopted
    │   └── InvalidOwner                       scopes Kubernetes forbids
    ├── TrackingError [ValueError]          - api: tracking an owner that was never stored
    ├── ConversionError [ValueError]        - api: converting between versions
    ├── Denied                              - api: an admission webhook refuses a request
    ├── CertificateError [ValueError]       - tls: a certificate or key that cannot be used
    ├── ConfigError [ValueError]            - client: kubeconfig, in-cluster config
    ├── MutationScopeError [ValueError]     - client: a safe write's mutation overreached
    ├── ClientError                         - client: a request failed
    │   ├── ConnectionFailed                   not reachable
    │   │   └── TLSVerificationFailed          the server's certificate is not trusted
    │   ├── PreflightFailed                    the manager's start-up check: unreachable,
    │   │                                      untrusted, 401, no credentials, no RBAC
    │   ├── RequestTimeout                     no answer in time
    │   ├── MalformedResponse                  data that breaks the API's protocol
    │   ├── UnknownKind                        kind not served
    │   │   └── KindNotServed                  (also a CacheError)
    │   └── ApiError                           the server answered with an error Status
    │       ├── BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed,
    │       ├── AlreadyExists, Conflict, Gone, Expired, Invalid, UnsupportedMediaType,
    │       └── TooManyRequests, InternalError, ServiceUnavailable, ServerTimeout
    ├── CacheError                          - cache
    │   ├── CacheNotStarted, NotCached, KindNotServed
    │   ├── CacheSyncTimeout [TimeoutError]
    │   └── ReadAfterWriteTimeout [TimeoutError]
    ├── SelectorError [ValueError]          - cache: a malformed label or field selector
    ├── CRDGenerationError                  - crd: types that make no valid CRD
    ├── PatternError [ValueError]           - crd: a pattern RE2 cannot run
    ├── LoadError                           - crd: the module to generate from
    ├── ControllerError                     - controller: misconfigured or misused
    ├── WorkQueueError                      - controller: the work queue
    │   └── NotProcessingError [ValueError]
    ├── ReconcileError                      - controller: returned by a reconcile
    │   ├── TerminalError                      not retried
    │   ├── ReconcileTimeout [TimeoutError]
    │   └── CleanupFailed                      a finalizer's cleanup
    ├── ManagerError                        - manager
    │   ├── ManagerStateError, LeaderElectionLost, ShutdownIncomplete
    │   └── RunnableFailed
    │       └── CacheSyncTimeout               (also the cache's)
    ├── DuplicateCheckError [ValueError]    - manager: a health check name taken
    ├── LockNotInitialized [RuntimeError]   - manager: the lease lock used out of order
    ├── ControlPlaneError [RuntimeError]    - testing: the local control plane
    └── WaitTimeout [AssertionError]        - testing: eventually() ran out

The webhook, migration and CLI packages root their own errors here too.
"""

from __future__ import annotations

__all__ = ["SetpointError"]


class SetpointError(Exception):
    """Base of every error setpoint raises on purpose; the module docstring draws the tree."""

    __module__ = "setpoint"

    def __repr__(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}({', '.join(map(repr, self.args))})"
