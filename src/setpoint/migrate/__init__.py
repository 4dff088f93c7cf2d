"""CRD evolution tools: migrating CRD manifests, and (as they land) comparing and retiring versions.

* :func:`migrate_crd` rewrites an apiextensions v1beta1 CRD (or a schema
  written with OpenAPI v2 habits) as apiextensions v1 and says what changed
  and what needs a person (``setpoint crd migrate``);
  :func:`python_module_for` writes the Python classes that generate it
  (``setpoint crd migrate --python``).

This package stands on :mod:`setpoint.crd` and :mod:`setpoint.client`; it
never imports the manager, controllers or webhooks (docs/architecture.md, "Where the
next parts live").
"""

from setpoint.migrate.convert import (
    CRDMigration,
    MigrateOptions,
    MigrationInputError,
    MigrationNote,
    migrate_crd,
)
from setpoint.migrate.pygen import python_module_for

__all__ = [
    "CRDMigration",
    "MigrateOptions",
    "MigrationInputError",
    "MigrationNote",
    "migrate_crd",
    "python_module_for",
]
