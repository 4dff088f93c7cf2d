"""CRD evolution tools: migrating CRD manifests, and (as they land) comparing and retiring versions.

* :func:`migrate_crd` rewrites an apiextensions v1beta1 CRD (or a schema
  written with OpenAPI v2 habits) as apiextensions v1 and says what changed
  and what needs a person (``setpoint crd migrate``);
  :func:`python_module_for` writes the Python classes that generate it
  (``setpoint crd migrate --python``).
* :func:`diff_crds` lists the incompatible changes between two versions of
  CRDs, one named check per schema keyword, failing closed on anything no
  check understands (``setpoint crd diff``); :func:`objects_rejected_by`
  lists the live objects a new schema rejects (``--against-cluster``), new
  versions included, after converting the objects to them.
* :func:`migrate_storage` rewrites every stored object at the storage version
  (the in-tree StorageVersionMigration where served, else resumable no-op
  writes) and then cleans ``status.storedVersions``
  (``setpoint crd migrate-storage``).
* :func:`take_snapshot` captures objects as normalized documents and
  :func:`diff_snapshots` compares two (``setpoint snapshot``, ``snapshot diff``).
* :func:`apply_crd` installs or replaces a CRD and waits until it is served; it
  refuses to drop a version still in ``storedVersions``.

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
from setpoint.migrate.diff import CHECKS, DiffConfig, DiffConfigError, Finding, diff_crds
from setpoint.migrate.dryrun import (
    Converter,
    DryRunError,
    DryRunReport,
    Rejection,
    objects_rejected_by,
)
from setpoint.migrate.install import CRDNotReady, StoredVersionInUse, apply_crd
from setpoint.migrate.pygen import python_module_for
from setpoint.migrate.snapshot import Difference, SnapshotError, diff_snapshots, take_snapshot
from setpoint.migrate.storage import (
    MigrationProgress,
    StorageMigrationError,
    StorageMigrationOptions,
    StorageMigrationResult,
    migrate_storage,
)

__all__ = [
    "CHECKS",
    "CRDMigration",
    "CRDNotReady",
    "Converter",
    "DiffConfig",
    "DiffConfigError",
    "Difference",
    "DryRunError",
    "DryRunReport",
    "Finding",
    "MigrateOptions",
    "MigrationInputError",
    "MigrationNote",
    "MigrationProgress",
    "Rejection",
    "SnapshotError",
    "StorageMigrationError",
    "StorageMigrationOptions",
    "StorageMigrationResult",
    "StoredVersionInUse",
    "apply_crd",
    "diff_crds",
    "diff_snapshots",
    "migrate_crd",
    "migrate_storage",
    "objects_rejected_by",
    "python_module_for",
    "take_snapshot",
]
