"""The operator's settings from TENANTS_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from tenants import SettingsError, TenantsSettings


def test_defaults_apply_when_nothing_is_set() -> None:
    settings = TenantsSettings.from_env({})
    assert settings == TenantsSettings()
    assert settings.directory_path == Path("tenants-directory.db")


def test_variables_override_defaults() -> None:
    settings = TenantsSettings.from_env(
        {
            "TENANTS_DIRECTORY_PATH": "/var/lib/tenants/directory.db",
            "TENANTS_DIRECTORY_BUSY_TIMEOUT": "1.5",
            "TENANTS_CLEANUP_DEADLINE": "12",
            "TENANTS_MAX_CONCURRENT_RECONCILES": "8",
            "TENANTS_FIELD_MANAGER": "acme-tenants",
            "TENANTS_DEGRADED_REQUEUE_AFTER": "",
        }
    )
    assert settings.directory_path == Path("/var/lib/tenants/directory.db")
    assert settings.directory_busy_timeout == 1.5
    assert settings.cleanup_deadline == 12.0
    assert settings.max_concurrent_reconciles == 8
    assert settings.field_manager == "acme-tenants"
    assert settings.degraded_requeue_after == TenantsSettings().degraded_requeue_after


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TENANTS_DIRECTORY_BUSY_TIMEOUT", "soon", "TENANTS_DIRECTORY_BUSY_TIMEOUT='soon'"),
        ("TENANTS_CLEANUP_DEADLINE", "0", "TENANTS_CLEANUP_DEADLINE"),
        ("TENANTS_CLEANUP_DEADLINE", "nan", "positive number of seconds"),
        ("TENANTS_MAX_CONCURRENT_RECONCILES", "0", "must be at least 1"),
        ("TENANTS_MAX_CONCURRENT_RECONCILES", "2.5", "not a valid int"),
    ],
)
def test_bad_values_name_the_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        TenantsSettings.from_env({variable: value})
