"""setpoint: a Python framework for writing Kubernetes operators.

Import it as ``import setpoint as sp``. Everything re-exported here is the
public API; other modules are implementation detail unless documented.

Names load on first use (PEP 562), so ``import setpoint`` costs almost nothing
and a process pays only for the layers it touches: a CLI that only generates
CRDs never imports the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # api: pure data
    "GroupVersionKind": "setpoint.api.gvk",
    "GroupVersionResource": "setpoint.api.gvk",
    "ObjectKey": "setpoint.api.keys",
    "ResourceInfo": "setpoint.api.kinds",
    "kinds": "setpoint.api",
    "meta": "setpoint.api",
    "TypedObject": "setpoint.api.types",
    "Runnable": "setpoint.api.runnable",
    "RunnableGroup": "setpoint.api.runnable",
    # typed resources and their declarations
    "DeclarationError": "setpoint.api.resource",
    "FieldSchema": "setpoint.api.resource",
    "IntOrString": "setpoint.api.resource",
    "Model": "setpoint.api.resource",
    "ObjectMeta": "setpoint.api.resource",
    "OwnerReference": "setpoint.api.resource",
    "PrinterColumn": "setpoint.api.resource",
    "Quantity": "setpoint.api.resource",
    "Resource": "setpoint.api.resource",
    "ResourceOptions": "setpoint.api.resource",
    "Rule": "setpoint.api.resource",
    "Scale": "setpoint.api.resource",
    "field": "setpoint.api.resource",
    "resource": "setpoint.api.resource",
    "PolicyRule": "setpoint.api.rbac",
    "rbac": "setpoint.api.rbac",
    # client
    "Client": "setpoint.client",
    "ClientConfig": "setpoint.client",
    "ClientOptions": "setpoint.client",
    "ConfigError": "setpoint.client",
    "load_config": "setpoint.client",
    "load_kubeconfig": "setpoint.client",
    "load_incluster_config": "setpoint.client",
    "Reader": "setpoint.client",
    "Writer": "setpoint.client",
    "StatusWriter": "setpoint.client",
    "Preconditions": "setpoint.client",
    "JsonPatch": "setpoint.client",
    "MergePatch": "setpoint.client",
    "StrategicMergePatch": "setpoint.client",
    "ApplyPatch": "setpoint.client",
    "ApiError": "setpoint.client",
    "AlreadyExists": "setpoint.client",
    "Conflict": "setpoint.client",
    "ConnectionFailed": "setpoint.client",
    "Expired": "setpoint.client",
    "Forbidden": "setpoint.client",
    "Gone": "setpoint.client",
    "Invalid": "setpoint.client",
    "NotFound": "setpoint.client",
    "RequestTimeout": "setpoint.client",
    "TooManyRequests": "setpoint.client",
    "UnknownKind": "setpoint.client",
}

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ApplyPatch",
    "Client",
    "ClientConfig",
    "ClientOptions",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "DeclarationError",
    "Expired",
    "FieldSchema",
    "Forbidden",
    "Gone",
    "GroupVersionKind",
    "GroupVersionResource",
    "IntOrString",
    "Invalid",
    "JsonPatch",
    "MergePatch",
    "Model",
    "NotFound",
    "ObjectKey",
    "ObjectMeta",
    "OwnerReference",
    "PolicyRule",
    "Preconditions",
    "PrinterColumn",
    "Quantity",
    "Reader",
    "RequestTimeout",
    "Resource",
    "ResourceInfo",
    "ResourceOptions",
    "Rule",
    "Runnable",
    "RunnableGroup",
    "Scale",
    "StatusWriter",
    "StrategicMergePatch",
    "TooManyRequests",
    "TypedObject",
    "UnknownKind",
    "Writer",
    "field",
    "kinds",
    "load_config",
    "load_incluster_config",
    "load_kubeconfig",
    "meta",
    "rbac",
    "resource",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'setpoint' has no attribute {name!r}")
    if module == "setpoint.api":
        value = importlib.import_module(f"setpoint.api.{name}")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # the same names, eagerly, for type checkers and IDEs
    from setpoint.api import kinds, meta
    from setpoint.api.gvk import GroupVersionKind, GroupVersionResource
    from setpoint.api.keys import ObjectKey
    from setpoint.api.kinds import ResourceInfo
    from setpoint.api.rbac import PolicyRule, rbac
    from setpoint.api.resource import (
        DeclarationError,
        FieldSchema,
        IntOrString,
        Model,
        ObjectMeta,
        OwnerReference,
        PrinterColumn,
        Quantity,
        Resource,
        ResourceOptions,
        Rule,
        Scale,
        field,
        resource,
    )
    from setpoint.api.runnable import Runnable, RunnableGroup
    from setpoint.api.types import TypedObject
    from setpoint.client import (
        AlreadyExists,
        ApiError,
        ApplyPatch,
        Client,
        ClientConfig,
        ClientOptions,
        ConfigError,
        Conflict,
        ConnectionFailed,
        Expired,
        Forbidden,
        Gone,
        Invalid,
        JsonPatch,
        MergePatch,
        NotFound,
        Preconditions,
        Reader,
        RequestTimeout,
        StatusWriter,
        StrategicMergePatch,
        TooManyRequests,
        UnknownKind,
        Writer,
        load_config,
        load_incluster_config,
        load_kubeconfig,
    )
