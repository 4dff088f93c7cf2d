"""Object keys: the identity a reconcile request carries."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ObjectKey"]


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """Namespace and name of one object. ``namespace`` is ``""`` for cluster-scoped objects.

    Keys are hashable and ordered, so they serve as work-queue items and cache keys.
    ``str(key)`` gives ``"namespace/name"`` (or ``"name"``), the form client-go uses.
    """

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> ObjectKey:
        """Parse ``"namespace/name"`` or ``"name"`` (cluster-scoped)."""
        namespace, _, name = text.rpartition("/")
        if not name:
            raise ValueError(f"object key {text!r} has an empty name")
        return cls(namespace, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name
