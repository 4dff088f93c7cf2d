"""The CRD tests' fixture types (tests/golden/crd) and where their golden files live."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from setpoint.crd import import_targets

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "crd"
"""tests/golden/crd: the fixture types module and the golden config/ tree."""

GOLDEN_CONFIG = GOLDEN_DIR / "config"
"""The golden kubebuilder config tree (crd/bases/*.yaml, rbac/role.yaml)."""

UPDATE_ENV = "SETPOINT_UPDATE_GOLDEN"
"""Set to 1 to regenerate the golden files instead of comparing against them."""


def load_fixtures() -> ModuleType:
    """Import tests/golden/crd/crd_golden_fixtures.py through the generator's own loader."""
    (module,) = import_targets([str(GOLDEN_DIR / "crd_golden_fixtures.py")])
    return module
