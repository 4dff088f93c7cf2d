"""Kubernetes' validation rules, in one place, as apimachinery's ``util/validation`` has them.

Pure data and pure functions (regular expressions and limits), so every layer can check a
name or a condition the way the API server will, and say why, before a request is sent.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = [
    "CONDITION_MESSAGE_MAX_LENGTH",
    "CONDITION_REASON_MAX_LENGTH",
    "CONDITION_REASON_PATTERN",
    "CONDITION_TYPE_MAX_LENGTH",
    "CONDITION_TYPE_PATTERN",
    "ConditionStatus",
]

# --------------------------------------------------------------------------- conditions

ConditionStatus: TypeAlias = Literal["True", "False", "Unknown"]
"""The three values of ``condition.status`` (strings, as the API defines them)."""

# The API server's validation of metav1.Condition (apimachinery/pkg/apis/meta/v1/types.go
# kubebuilder markers, enforced by ValidateConditions and by CRD schemas built from it).
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_MAX_LENGTH = 316
CONDITION_REASON_MAX_LENGTH = 1024
CONDITION_MESSAGE_MAX_LENGTH = 32768
