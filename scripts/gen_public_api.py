"""Regenerate src/setpoint/__init__.py from PUBLIC_API below, or check that it is current.

The public surface is a deliberate list (as httpx's ``__init__`` is): what an operator
author uses. Everything else stays importable from its package. Names load lazily on first
use; this script writes the lazy table, ``__all__`` and the ``TYPE_CHECKING`` imports so the
three never drift apart.

Run: ``.venv/bin/python scripts/gen_public_api.py`` to write the file, ``--check`` (part of
``make check``) to fail when it is out of date, or when an exported error does not show
its public path (``setpoint.NotFound``): such a class needs ``__module__ = "setpoint"``.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

# module -> names it exports publicly; "alias=attr" exports attr under another name.
PUBLIC_API: dict[str, list[str]] = {
    "setpoint.api": ["kinds", "meta"],
    "setpoint.api.gvk": ["GroupVersionKind"],
    "setpoint.api.metadata": ["Metadata"],
    "setpoint.api.keys": ["ObjectKey"],
    "setpoint.api.declaration": [
        "Constraint",
        "DeclarationError",
        "IntOrString",
        "PrinterColumn",
        "Quantity",
        "Rule",
        "Scale",
        "at_most_one_of",
        "exactly_one_of",
        "field",
        "resource",
    ],
    "setpoint.api.resource": [
        "Model",
        "ObjectMeta",
        "OwnerReference",
        "Resource",
    ],
    "setpoint.api.conversion": ["ConversionError", "Convertible", "convert"],
    "setpoint.api.rbac": ["PolicyRule", "rbac"],
    "setpoint.api.admission": [
        "AdmissionOptions",
        "CelValidation",
        "CustomDefaulter",
        "CustomValidator",
        "Denied",
        "Warnings",
    ],
    "setpoint.api.conditions": [
        "Condition",
        "ConditionError",
        "find_condition",
        "is_condition_false",
        "is_condition_true",
        "remove_condition",
        "set_condition",
        "set_observed_generation",
    ],
    "setpoint.api.owners": [
        "AlreadyOwned",
        "InvalidOwner",
        "NotAdopted",
        "controller_of",
        "is_controlled_by",
        "is_owned_by",
        "remove_owner_reference",
        "set_controller_reference",
        "set_owner_reference",
    ],
    "setpoint.api.errors": ["SetpointError"],
    "setpoint.api.labelselector": ["LabelSelector", "LabelSelectorRequirement"],
    "setpoint.api.tracking": ["AlreadyTracked", "TrackingError", "track_owner", "tracked_owner"],
    "setpoint.client": [
        "AlreadyExists",
        "ApiError",
        "ClientError",
        "ApplyPatch",
        "Client",
        "ConfigError",
        "Conflict",
        "ConnectionFailed",
        "Expired",
        "Forbidden",
        "Gone",
        "Invalid",
        "JsonPatch",
        "Kind",
        "MergePatch",
        "NotFound",
        "Preconditions",
        "ReadWriter",
        "Reader",
        "RequestTimeout",
        "StatusWriter",
        "StrategicMergePatch",
        "TooManyRequests",
        "UnknownKind",
        "Writer",
        "load_config",
        "load_kubeconfig",
    ],
    "setpoint.client.safe": [
        "Adoption",
        "FinalizerOutcome",
        "FinalizerResult",
        "MutationScopeError",
        "OperationResult",
        "RetryOptions",
        "WriteResult",
        "add_finalizer",
        "apply_child",
        "apply_status",
        "create_or_patch",
        "create_or_update",
        "delete_tracked_children",
        "has_finalizer",
        "remove_finalizer",
        "update_status",
    ],
    "setpoint.cache": [
        "Cache",
        "CacheOptions",
        "CacheSyncTimeout",
        "KindNotServed",
        "KindOptions",
        "NotCached",
        "ReadAfterWriteTimeout",
        "SelectorError",
        "UndecodableObject",
        "by_controller",
        "by_field",
        "by_label",
        "by_owner_uid",
    ],
    "setpoint.controller": [
        "AddEvent",
        "AnnotationsChanged",
        "CleanupFailed",
        "CleanupRetry",
        "ChannelSource",
        "ClusterRequest",
        "DeleteEvent",
        "Dependent",
        "DependentFailed",
        "DependentInvalid",
        "Dependents",
        "PerObjectPollingSource",
        "PollingSource",
        "rollout_complete",
        "ReconcileTimeout",
        "UpdateEvent",
        "ControllerBuilder=Builder",
        "Context",
        "ControllerOptions",
        "GenerationChanged",
        "LabelSelectorPredicate",
        "LabelsChanged",
        "Predicate",
        "ReconcileError",
        "Request",
        "Result",
        "ResourceVersionChanged",
        "SyncContext",
        "TerminalError",
        "all_of",
        "any_of",
        "enqueue_all",
        "enqueue_from_annotation",
        "enqueue_from_label",
        "enqueue_tracked_owner",
        "not_",
    ],
    "setpoint.manager": [
        "LeaderElectionLost",
        "LeaderElectionOptions",
        "LeadershipLossPolicy",
        "Manager",
        "ManagerOptions",
        "RunnableFailed",
        "ClusterSetOptions",
        "ShardKey",
        "ShardLeaseLost",
        "ShardingOptions",
    ],
    "setpoint.webhook.certificates": [
        "SelfManagedCertificates",
        "SelfManagedCertificatesOptions",
        "service_hosts",
    ],
    "setpoint.observability.logging": ["configure_logging", "get_logger"],
    "setpoint.observability.metrics": ["Metrics"],
}

HEADER = '''"""setpoint: a Python framework for writing Kubernetes operators.

Import it as ``import setpoint as sp``. Everything re-exported here is the
public API; other modules are implementation detail unless documented.

Names load on first use (PEP 562), so ``import setpoint`` costs almost nothing
and a process pays only for the layers it touches: a CLI that only generates
CRDs never imports the HTTP stack.

This file is generated by ``scripts/gen_public_api.py``; edit the list there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from setpoint._lazy import lazy_module

'''

FOOTER = """

__getattr__, __dir__ = lazy_module("setpoint", globals(), _EXPORTS)
"""

TARGET = Path(__file__).resolve().parents[1] / "src" / "setpoint" / "__init__.py"


def render() -> str:
    """The text of src/setpoint/__init__.py, formatted as ruff formats it."""
    table: dict[str, tuple[str, str | None]] = {}
    imports: dict[str, list[str]] = {}
    for module, names in PUBLIC_API.items():
        for entry in names:
            public, _, attr = entry.partition("=")
            attr = attr or public
            if module == "setpoint.api" and attr in ("kinds", "meta"):
                table[public] = (f"setpoint.api.{attr}", None)
            else:
                table[public] = (module, attr)
            imports.setdefault(module, []).append(
                public if public == attr else f"{attr} as {public}"
            )
    lines = [HEADER, "# public name -> (module, attribute or None for the module itself)\n"]
    lines.append("_EXPORTS: dict[str, tuple[str, str | None]] = {\n")
    for public in sorted(table):
        module, attr = table[public]
        lines.append(f"    {public!r}: ({module!r}, {attr!r}),\n".replace("'", '"'))
    lines.append("}\n\n__all__ = [\n")
    for public in sorted(table):
        lines.append(f'    "{public}",\n')
    lines.append("]\n\nif TYPE_CHECKING:  # the same names, eagerly, for type checkers and IDEs\n")
    for module in sorted(imports):
        names = ", ".join(sorted(imports[module]))
        lines.append(f"    from {module} import {names}\n")
    lines.append(FOOTER)
    ruff = str(Path(sys.executable).with_name("ruff"))
    text = "".join(lines)
    for command in (["check", "--fix", "--select", "I", "--quiet"], ["format"]):
        text = subprocess.run(
            [ruff, *command, "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return text


def misplaced_errors() -> list[str]:
    """Exported exception classes whose ``__module__`` is not ``setpoint``."""
    sys.path.insert(0, str(TARGET.parents[1]))
    setpoint = importlib.import_module("setpoint")
    bad = []
    for name in setpoint.__all__:
        value = getattr(setpoint, name)
        exported_error = isinstance(value, type) and issubclass(value, BaseException)
        if exported_error and value.__module__ != "setpoint":
            bad.append(f"{name} (defined in {value.__module__})")
    return bad


def main() -> int:
    """Write src/setpoint/__init__.py, or with ``--check`` compare it; return the exit code."""
    text = render()
    if "--check" not in sys.argv[1:]:
        TARGET.write_text(text)
        return 0
    problems = []
    if TARGET.read_text() != text:
        problems.append(
            f"{TARGET.name} is out of date with PUBLIC_API: run "
            ".venv/bin/python scripts/gen_public_api.py"
        )
    problems += [
        f"{entry} is exported but shows its private path; set __module__ = 'setpoint' in it"
        for entry in misplaced_errors()
    ]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
