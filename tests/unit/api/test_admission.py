"""Admission declarations: validators and defaulters are checked when the class is defined."""

from __future__ import annotations

from typing import Any

import pytest

import setpoint as sp
from setpoint.api.admission import admission_spec_of, is_admission_webhook
from tests._support.vessels import GROUP, Vessel, VesselDefaulter, VesselValidator


def test_defaults_follow_kubebuilder() -> None:
    """Paths, names and operations default as kubebuilder's markers would write them."""
    validator = admission_spec_of(VesselValidator)
    assert validator.path == "/validate-admission-test-setpoint-dev-v1-vessel"
    assert validator.name == f"vvessel-v1.{GROUP}"
    assert validator.operations == ("CREATE", "UPDATE")  # no validate_delete defined
    assert not validator.mutating and validator.resource is Vessel
    defaulter = admission_spec_of(VesselDefaulter())
    assert defaulter.path == "/mutate-admission-test-setpoint-dev-v1-vessel"
    assert defaulter.name == f"mvessel-v1.{GROUP}"
    assert defaulter.operations == ("CREATE", "UPDATE") and defaulter.mutating
    assert is_admission_webhook(VesselValidator) and not is_admission_webhook(sp.CustomValidator)


def test_declaration_mistakes_fail_when_the_class_is_defined() -> None:
    """Each mistake names the class and the fix, at import time."""
    with pytest.raises(sp.DeclarationError, match="without naming the resource"):

        class NoResource(sp.CustomValidator):  # type: ignore[type-arg]
            def validate_create(self, obj: Any) -> sp.Warnings:
                return None

    with pytest.raises(sp.DeclarationError, match="defines none of"):

        class NothingDefined(sp.CustomValidator[Vessel]):
            pass

    with pytest.raises(sp.DeclarationError, match="lists DELETE but the class defines no"):

        class WrongOperations(sp.CustomValidator[Vessel]):
            webhook_options = sp.AdmissionOptions(operations=("CREATE", "DELETE"))

            def validate_create(self, obj: Vessel) -> sp.Warnings:
                return None

    with pytest.raises(sp.DeclarationError, match="does not define default"):

        class NoDefault(sp.CustomDefaulter[Vessel]):
            pass

    with pytest.raises(sp.DeclarationError, match=r"both sp\.CustomValidator and sp\.Cus"):

        class Both(sp.CustomValidator[Vessel], sp.CustomDefaulter[Vessel]):
            def validate_create(self, obj: Vessel) -> sp.Warnings:
                return None

            def default(self, obj: Vessel) -> None:
                return None

    with pytest.raises(sp.DeclarationError, match="not a Resource class"):

        class NotAResource(sp.CustomValidator[int]):  # type: ignore[type-var]
            def validate_create(self, obj: Any) -> sp.Warnings:
                return None


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"path": "validate"}, "must start with '/'"),
        ({"name": "vessel.example"}, "at least three labels"),
        ({"operations": ("CONNECT",)}, "must list one or more of"),
        ({"timeout_seconds": 31}, "1 to 30"),
    ],
)
def test_admission_options_are_validated(kwargs: dict[str, Any], fragment: str) -> None:
    """Bad options are refused with the option's name."""
    with pytest.raises(ValueError, match="AdmissionOptions") as info:
        sp.AdmissionOptions(**kwargs)
    assert fragment in str(info.value)
