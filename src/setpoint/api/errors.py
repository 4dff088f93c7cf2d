"""One root for every error setpoint raises on purpose: :class:`SetpointError`.

``except setpoint.SetpointError`` catches anything setpoint raised deliberately (not a bug
in it, not a ``KeyboardInterrupt``). Every error also keeps the built-in base that says
what kind of failure it is (``ValueError`` for bad input, ``TimeoutError`` for a wait that
ran out, ...), so code catching those keeps working. Errors exported at the top level show
their public path in tracebacks and reprs (``setpoint.NotFound``, not
``setpoint.client.errors.NotFound``).

The tree (built-in bases in brackets; ``-`` marks where the error lives; ``(internal)``
marks errors a package raises and handles itself, which a caller should not see)::

    SetpointError
    ├── DeclarationError [TypeError]        - api: a resource or model declaration
    ├── ConditionError [ValueError]         - api: a condition the server would refuse
    ├── OwnerError [ValueError]             - api: owner references
    │   ├── AlreadyOwned                       another controller owns it
    │   ├── NotAdopted                         exists without a controller; not adopted
    │   └── InvalidOwner                       scopes Kubernetes forbids
    ├── TrackingError [ValueError]          - api: tracking an owner that was never stored
    │   └── AlreadyTracked                     tracked by another owner already
    ├── ConversionError [ValueError]        - api: converting between versions
    ├── Denied                              - api: an admission webhook refuses a request
    ├── ExtraNotInstalled [ImportError]     - setpoint._extras: an optional part (the tools,
    │                                         otel, testing extras) is not installed
    ├── CertificateError [ValueError]       - tls: a certificate or key that cannot be used
    ├── PrivateFileError [OSError]          - observability: a file for secrets (a recording)
    │                                         that is not private to this user
    ├── ConfigError [ValueError]            - client: kubeconfig, in-cluster config
    ├── MutationScopeError [ValueError]     - client: a safe write's mutation overreached
    ├── ClientError                         - client: a request failed
    │   ├── ConnectionFailed                   not reachable
    │   │   └── TLSVerificationFailed          the server's certificate is not trusted
    │   ├── PreflightFailed                    the manager's start-up check: unreachable,
    │   │                                      untrusted, 401, no credentials, no RBAC
    │   ├── RequestTimeout                     no answer in time
    │   ├── MalformedResponse                  data that breaks the API's protocol
    │   │   └── ResponseTooLarge               an answer or watch event over the cap
    │   ├── UnknownKind                        kind not served
    │   │   └── KindNotServed                  (also a CacheError)
    │   └── ApiError                           the server answered with an error Status
    │       ├── BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed,
    │       ├── AlreadyExists, Conflict, Gone (Expired), Invalid, UnsupportedMediaType,
    │       └── TooManyRequests, InternalError, ServiceUnavailable, ServerTimeout
    ├── HttpError [OSError]                 - client (internal): the HTTP/1.1 pool's failures,
    │   │                                     which the transport turns into ClientErrors
    │   ├── ConnectError                       nothing was sent
    │   │   ├── UntrustedCertificate           (-> TLSVerificationFailed)
    │   │   └── ProxyLoginRefused
    │   ├── ConnectionBroken                   sent, no complete answer
    │   │   └── ProtocolError
    │   └── BodyTooLarge                       (-> ResponseTooLarge)
    ├── RequestError                        - server (internal): a request refused before a
    │                                         handler sees it (answered 4xx)
    ├── CacheError                          - cache
    │   ├── CacheNotStarted, NotCached, KindNotServed
    │   ├── UndecodableObject [ValueError]     a cached object its typed class refuses
    │   ├── CacheSyncTimeout [TimeoutError]
    │   │   └── StartupSyncTimeout             (also the manager's RunnableFailed)
    │   └── ReadAfterWriteTimeout [TimeoutError]
    ├── SelectorError [ValueError]          - cache: a malformed label or field selector
    ├── CRDGenerationError                  - crd: types that make no valid CRD
    ├── PatternError [ValueError]           - crd: a pattern RE2 cannot run
    ├── LoadError                           - crd: the module to generate from
    ├── ControllerError                     - controller: misconfigured or misused
    ├── WorkQueueError                      - controller: the work queue
    │   ├── ShutDown                           the queue was shut down
    │   └── NotProcessingError [ValueError]
    ├── ReconcileError                      - controller: returned by a reconcile
    │   ├── TerminalError                      not retried
    │   ├── ReconcileTimeout [TimeoutError]
    │   └── CleanupFailed                      a finalizer's cleanup
    ├── MalformedAdmissionReview [ValueError]  - webhook: a body that is no AdmissionReview
    ├── MalformedConversionReview [ValueError] - webhook: a body that is no ConversionReview
    ├── ReviewTooLarge [ValueError]         - webhook: more JSON values than a review may hold
    ├── NotJSON, WrongType [ValueError]     - webhook (internal): a large review's split;
    │                                         answered as the Malformed...Review above
    ├── TooDeepToSplit [ValueError]         - webhook (internal): a body msgspec cannot split
    │                                         (Python 3.11); answered on the whole-body path
    ├── MigrationInputError [ValueError]    - migrate: a document it cannot migrate
    ├── DiffConfigError [ValueError]        - migrate: an invalid diff configuration
    ├── DryRunError [RuntimeError]          - migrate: the dry-run check cannot run
    ├── CRDNotReady [TimeoutError]          - migrate: a CRD not Established in time
    ├── StoredVersionInUse [ValueError]     - migrate: dropping a version still stored
    ├── StorageMigrationError [RuntimeError] - migrate: the storage migration cannot go on
    ├── SnapshotError [ValueError]          - migrate: a kind or snapshot file it cannot use
    ├── ManagerError                        - manager
    │   ├── ManagerStateError, ShutdownIncomplete
    │   ├── LeaderElectionLost
    │   │   └── ShardLeaseLost                 the shard Lease of this replica
    │   ├── WorkerStartupFailed                a worker of ``processes`` N exited unready
    │   └── RunnableFailed
    │       └── StartupSyncTimeout             (also a CacheSyncTimeout)
    ├── DuplicateCheckError [ValueError]    - manager: a health check name taken
    ├── LockNotInitialized [RuntimeError]   - manager: the lease lock used out of order
    ├── ControlPlaneError [RuntimeError]    - testing: the local control plane
    ├── WaitTimeout [AssertionError]        - testing: a wait of eventually() ran out
    ├── ReplayError                         - testing: a replay or exploration cannot go on
    ├── PatchError [ValueError]             - testing (internal): a patch the fake refuses
    │                                         (answered as the server's 4xx)
    ├── InputError [ValueError]             - cli: an argument of ``crd diff`` it cannot read
    ├── OperatorLoadError                   - cli: ``setpoint run`` cannot load the operator
    ├── DemoError                           - cli: a ``setpoint demo`` step failed
    ├── ScaffoldConflict [FileExistsError]  - cli: scaffolding would overwrite a person's work
    ├── ScaffoldNameError [ValueError]      - cli: a name scaffolding cannot use
    └── ProjectFileError [ValueError]       - cli: the scaffold's PROJECT file

``tests/unit/test_public_api.py`` walks every module's ``__all__`` and fails on an exported
exception class outside this root.
"""

from __future__ import annotations

__all__ = ["SetpointError"]


class SetpointError(Exception):
    """Base of every error setpoint raises on purpose; the module docstring draws the tree."""

    __module__ = "setpoint"

    def __repr__(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}({', '.join(map(repr, self.args))})"
