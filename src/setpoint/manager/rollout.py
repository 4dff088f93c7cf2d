"""Rolling out a new operator version beside the old one, moving objects one at a time.

Replacing an operator's Deployment moves every object to the new code at once: a bug in the
new version reaches all of them before anyone sees it. A side-by-side rollout runs both
versions and moves objects gradually, by a label that each version's cache selects on
(server-side, so neither version even sees the other's objects):

* the **incumbent** (the version that runs today) reconciles every object *not* labelled for
  a version it yields to: ``Rollout(version="v1", kinds=(Widget,), yields_to=("v2",))``
  selects ``setpoint.dev/operator-version notin (v2)``;
* the **candidate** reconciles only the objects labelled for it:
  ``Rollout(version="v2", kinds=(Widget,), candidate=True)`` selects
  ``setpoint.dev/operator-version=v2``;
* an object moves when it is labelled ``setpoint.dev/operator-version=v2``
  (:func:`move_to`, or ``kubectl label``): the incumbent's watch sees it leave its
  selector (a delete event: the controller drops it, its finalizer stays), the candidate's
  sees it arrive and reconciles it. Removing the label moves it back.
* Done: run the new version without a :class:`Rollout` (no selector: it takes every object,
  labelled or not) and stop the old one. The labels can stay or go.

Expected flow:
    1. Redeploy the current version with ``yields_to`` (it behaves as before: no object
       carries the label yet).
    2. Deploy the new version as a second Deployment, with ``candidate=True`` and its own
       leader-election Lease name (two versions are two operators, not two replicas).
    3. Label a few objects; watch them (``setpoint doctor rollout`` counts the objects per
       version; the kstatus conditions say whether they converge); label more.
    4. Finish as above, or roll back by removing the labels and the candidate.

Guarantees:
    - At any time an object is in exactly one version's cache: the selectors partition the
      objects by the label's value.
    - The selection is per *for_* kind named in ``kinds``; children (``owns``) are not
      filtered: a child event of a moved owner reaches the incumbent, whose read of the
      owner from its cache finds nothing (the owner is outside its selector), which a
      reconciler treats as "the object is gone". So the incumbent must not clean up
      external state on "not found", only through a finalizer (a moved object being
      deleted is the candidate's; its finalizer cleanup runs there).

Caveats:
    - At the moment of a move, a reconcile the incumbent already started finishes; a write it
      makes then may race the candidate's first reconcile (optimistic concurrency rejects the
      stale one; both versions must use the same finalizer names and status layout).
    - Both versions must serve the same CRD versions (a conversion webhook is one Service:
      run it from the version whose converters know every served version).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from setpoint.api.meta import metadata_of
from setpoint.api.types import Kind, split_kind
from setpoint.api.validation import label_value_problem
from setpoint.cache import Cache, CacheOptions, KindOptions
from setpoint.client.client import Client
from setpoint.client.patch import MergePatch
from setpoint.client.protocols import ApiClient

__all__ = ["ROLLOUT_LABEL", "Rollout", "move_to", "version_of"]

ROLLOUT_LABEL: Final = "setpoint.dev/operator-version"
"""The label whose value names the operator version that reconciles an object."""


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """Which objects of ``kinds`` this operator version reconciles during a rollout."""

    version: str
    """This operator version's name, a label value (``v2``, ``1.4.0``)."""
    kinds: tuple[Kind[Any], ...]
    """The kinds whose objects move (the controllers' ``for_`` kinds): typed classes or GVKs."""
    yields_to: tuple[str, ...] = ()
    """For the incumbent: the versions objects can move to; it leaves objects labelled so."""
    candidate: bool = False
    """For the new version: reconcile only the objects labelled with :attr:`version`."""
    label: str = field(default=ROLLOUT_LABEL)
    """The label (change it to run two independent rollouts of two operators at once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        object.__setattr__(self, "yields_to", tuple(self.yields_to))
        for value in (self.version, *self.yields_to):
            problem = label_value_problem(value) if value else "it is empty"
            if problem is not None:
                raise ValueError(f"Rollout: version {value!r} is not a label value: {problem}")
        if not self.kinds:
            raise ValueError("Rollout.kinds is empty: name the for_ kinds whose objects move")
        if self.candidate == bool(self.yields_to):
            raise ValueError(
                "Rollout: give the incumbent yields_to=(<new versions>,) or mark the new "
                "version candidate=True, exactly one of the two; after the rollout, run the "
                "new version without a Rollout"
            )
        if self.version in self.yields_to:
            raise ValueError(f"Rollout: version {self.version!r} cannot yield to itself")

    @property
    def selector(self) -> str:
        """The label selector of this version's objects."""
        if self.candidate:
            return f"{self.label}={self.version}"
        return f"{self.label} notin ({','.join(sorted(self.yields_to))})"

    def cache_options(self, base: CacheOptions | None = None) -> CacheOptions:
        """``base`` (default: the defaults) with :attr:`selector` ANDed into each kind's."""
        base = base if base is not None else CacheOptions()
        by_kind: dict[Kind[Any], KindOptions] = dict(base.by_kind)
        for kind in self.kinds:
            gvk = split_kind(kind)[0]
            over = by_kind.get(gvk) or KindOptions()
            existing = over.labels if over.labels is not None else base.labels
            if isinstance(existing, Mapping):
                existing = ",".join(f"{k}={v}" for k, v in sorted(existing.items()))
            labels = f"{existing},{self.selector}" if existing else self.selector
            by_kind[gvk] = replace(over, labels=labels)
        return replace(base, by_kind=by_kind)

    def new_cache(self, base: CacheOptions | None = None) -> Callable[[ApiClient], Cache]:
        """A ``ManagerOptions.new_cache`` whose cache selects this version's objects."""
        options = self.cache_options(base)
        return lambda client: Cache(client, options=options)


def version_of(obj: Mapping[str, Any], *, label: str = ROLLOUT_LABEL) -> str | None:
    """The version an object is labelled for, or ``None`` (the incumbent's)."""
    labels = metadata_of(obj).get("labels") or {}
    value = labels.get(label)
    return str(value) if value else None


async def move_to(
    client: Client,
    kind: Kind[Any],
    names: Iterable[str],
    *,
    version: str | None,
    namespace: str | None = None,
    label: str = ROLLOUT_LABEL,
) -> None:
    """Label each named object for ``version`` (``None``: remove the label, back to the incumbent).

    One merge patch per object, touching only the label.
    """
    patch = MergePatch({"metadata": {"labels": {label: version}}})
    for name in names:
        await client.patch(kind, name, patch, namespace=namespace)
