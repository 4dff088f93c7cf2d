"""Errors the CRD generator and the structural-schema validator report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from setpoint.api.errors import SetpointError

__all__ = ["CRDGenerationError", "SchemaPath", "StructuralError", "field_path_of"]

SchemaPath = tuple[str | int, ...]
"""A location inside a schema as the keys leading to it: ``("properties", "spec", "items")``."""


def field_path_of(schema_path: SchemaPath) -> str:
    """The object field path a schema location describes: ``.spec.items[*].name``.

    Keys that do not name object fields (``default``, ``x-kubernetes-validations``
    and the like) are left out, so the path names the field the problem is on.
    """
    out = ""
    i = 0
    while i < len(schema_path):
        key = schema_path[i]
        if key == "properties" and i + 1 < len(schema_path):
            out += f".{schema_path[i + 1]}"
            i += 2
            continue
        if key in ("items", "additionalProperties"):
            out += "[*]"
        elif key in ("allOf", "anyOf", "oneOf", "not"):
            break
        i += 1
    return out or "."


@dataclass(frozen=True, kw_only=True)
class StructuralError:
    """One reason a schema (or a declaration behind it) would be rejected by the API server.

    ``origin`` names the Python class and field the schema node came from when
    the generator knows it (``WidgetSpec.replicas``); ``fix`` says what to change.
    """

    schema_path: SchemaPath
    """Where in the ``openAPIV3Schema`` the problem is."""
    message: str
    """What is wrong."""
    fix: str
    """How to fix it, in terms of the Python declaration when possible."""
    origin: str | None = None
    """The Python ``Class.field`` behind the schema node, when known."""
    resource: str | None = None
    """The resource version the schema belongs to (``Widget demo.setpoint.dev/v1``), when known."""

    @property
    def field_path(self) -> str:
        """The object field the problem is on, e.g. ``.spec.replicas``."""
        return field_path_of(self.schema_path)

    def __str__(self) -> str:
        where = self.field_path
        if self.origin:
            where = f"{self.origin} ({where})"
        if self.resource:
            where = f"{self.resource}: {where}"
        return f"{where}: {self.message}. Fix: {self.fix}"


class CRDGenerationError(SetpointError):
    """The Python types cannot be turned into a CRD the API server accepts.

    ``errors`` lists every problem found (not just the first), each naming the
    Python class and field and how to fix it.
    """

    def __init__(self, errors: Sequence[StructuralError]) -> None:
        self.errors = list(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        super().__init__(f"cannot generate a valid CRD ({len(self.errors)} problem(s)):\n{lines}")
