"""The operator's own settings, read from the environment (the ``setup`` contract).

``setpoint run`` configures the manager (kubeconfig, leader election, probes, metrics) from
its flags; what only this operator needs comes from ``TENANTS_*`` environment variables,
parsed and validated here, so a bad value stops the process at startup with a message naming
the variable.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_PREFIX", "SettingsError", "TenantsSettings"]

ENV_PREFIX = "TENANTS_"
"""Every environment variable of this operator starts with this."""


class SettingsError(ValueError):
    """A setting (or the environment variable it came from) has an unusable value."""


@dataclass(frozen=True, kw_only=True)
class TenantsSettings:
    """Settings of the tenants operator; each default is documented on its attribute.

    Build it directly (tests, embedding) or with :meth:`from_env`, which maps each attribute
    to ``TENANTS_<ATTRIBUTE>`` (``directory_path`` -> ``TENANTS_DIRECTORY_PATH``).
    """

    directory_path: Path = Path("tenants-directory.db")
    """The SQLite file of the tenant directory (created if missing, with its table). Default:
    ``tenants-directory.db`` in the working directory; the Deployment in ``config/manager``
    sets ``/var/lib/tenants/directory.db`` on a volume."""

    directory_busy_timeout: float = 5.0
    """Seconds one directory call waits for a lock held by another connection before it fails
    with "database is locked" (SQLite's busy timeout). A failed call is retried by the
    controller with backoff, so this only bounds how long one attempt blocks its thread."""

    cleanup_deadline: float = 30.0
    """Seconds the finalizer's cleanup (unregistering a deleted Tenant from the directory) may
    take before it is abandoned and retried with backoff."""

    field_manager: str = "tenants-operator"
    """The server-side apply field manager: the operator owns exactly the fields it applies
    under this name, and leaves everyone else's alone."""

    max_concurrent_reconciles: int = 4
    """Tenants reconciled in parallel (one Tenant is never reconciled twice at once)."""

    degraded_requeue_after: float = 60.0
    """Seconds after which a Degraded Tenant is looked at again even without an event (a
    safety net: conflicts and outages normally resolve through watch events)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory_path", Path(self.directory_path))
        if not str(self.directory_path).strip():
            raise SettingsError("TenantsSettings.directory_path is empty: name the SQLite file")
        for name in ("directory_busy_timeout", "cleanup_deadline", "degraded_requeue_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise SettingsError(
                    f"TenantsSettings.{name}={value!r} must be a positive number of seconds "
                    f"(environment: {ENV_PREFIX}{name.upper()})"
                )
        if not self.field_manager or len(self.field_manager) > 128:
            raise SettingsError(
                "TenantsSettings.field_manager must be 1 to 128 characters (it names the "
                "operator in every object's managedFields)"
            )
        if isinstance(self.max_concurrent_reconciles, bool) or self.max_concurrent_reconciles < 1:
            raise SettingsError(
                f"TenantsSettings.max_concurrent_reconciles={self.max_concurrent_reconciles!r} "
                "must be at least 1"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TenantsSettings:
        """Settings from ``TENANTS_*`` variables; unset ones keep their defaults.

        Raises:
            SettingsError: a variable does not parse or its value is out of range; the message
                names the variable.

        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        parsers: dict[str, type] = {
            "directory_path": Path,
            "directory_busy_timeout": float,
            "cleanup_deadline": float,
            "field_manager": str,
            "max_concurrent_reconciles": int,
            "degraded_requeue_after": float,
        }
        for name, parse in parsers.items():
            variable = f"{ENV_PREFIX}{name.upper()}"
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            try:
                values[name] = parse(raw)
            except ValueError:
                raise SettingsError(f"{variable}={raw!r} is not a valid {parse.__name__}") from None
        return cls(**values)  # type: ignore[arg-type]
