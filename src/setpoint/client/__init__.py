"""The async Kubernetes client: config, transport, verbs, watch, discovery, typed errors.

::

    from setpoint.client import Client
    async with Client.from_kubeconfig() as client:
        ...
"""

from setpoint.api.types import Kind
from setpoint.client.client import (
    Client,
    ClientOptions,
    Preconditions,
    PropagationPolicy,
    Selector,
    Watch,
)
from setpoint.client.config import ClientConfig, ConfigError, load_incluster_config
from setpoint.client.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Cause,
    ClientError,
    Conflict,
    ConnectionFailed,
    Expired,
    Forbidden,
    Gone,
    Invalid,
    MalformedResponse,
    NotFound,
    RequestTimeout,
    ServiceUnavailable,
    TLSVerificationFailed,
    TooManyRequests,
    Unauthorized,
    UnknownKind,
)
from setpoint.client.kubeconfig import (
    kubeconfig_from_secret,
    load_config,
    load_kubeconfig,
    load_kubeconfig_data,
)
from setpoint.client.objects import Applied, ObjectList, WatchEvent
from setpoint.client.patch import ApplyPatch, JsonPatch, MergePatch, Patch, StrategicMergePatch
from setpoint.client.preflight import AccessNeed, PreflightFailed, PreflightProblem, preflight
from setpoint.client.protocols import Reader, ReadWriter, StatusWriter, Writer
from setpoint.client.server_warnings import FieldValidation, collect_warnings
from setpoint.client.transport import TransportOptions

__all__ = [
    "AccessNeed",
    "AlreadyExists",
    "ApiError",
    "Applied",
    "ApplyPatch",
    "BadRequest",
    "Cause",
    "Client",
    "ClientConfig",
    "ClientError",
    "ClientOptions",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "Expired",
    "FieldValidation",
    "Forbidden",
    "Gone",
    "Invalid",
    "JsonPatch",
    "Kind",
    "MalformedResponse",
    "MergePatch",
    "NotFound",
    "ObjectList",
    "Patch",
    "Preconditions",
    "PreflightFailed",
    "PreflightProblem",
    "PropagationPolicy",
    "ReadWriter",
    "Reader",
    "RequestTimeout",
    "Selector",
    "ServiceUnavailable",
    "StatusWriter",
    "StrategicMergePatch",
    "TLSVerificationFailed",
    "TooManyRequests",
    "TransportOptions",
    "Unauthorized",
    "UnknownKind",
    "Watch",
    "WatchEvent",
    "Writer",
    "collect_warnings",
    "kubeconfig_from_secret",
    "load_config",
    "load_incluster_config",
    "load_kubeconfig",
    "load_kubeconfig_data",
    "preflight",
]
