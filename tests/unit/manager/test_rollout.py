"""Rollout: the selectors that split objects between two operator versions (issue 32)."""

from __future__ import annotations

import pytest

from setpoint.cache import CacheOptions, KindOptions
from setpoint.cache.selectors import LabelMatcher
from setpoint.cli.doctor_rollout import (
    INCUMBENT,
    RolloutReport,
    find_rollouts,
    render_rollout,
    rollout_summary,
)
from setpoint.manager.rollout import ROLLOUT_LABEL, Rollout, version_of
from tests._support.kinds import DOODAD, GIZMO, Gizmo


def obj(name: str, version: str | None = None, kind: str = "Gizmo") -> dict[str, object]:
    labels = {ROLLOUT_LABEL: version} if version else {"app": "x"}
    return {
        "apiVersion": "test.setpoint.dev/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
    }


def test_the_two_selectors_partition_the_objects() -> None:
    incumbent = LabelMatcher.parse(
        Rollout(version="v1", kinds=(Gizmo,), yields_to=("v2",)).selector
    )
    candidate = LabelMatcher.parse(Rollout(version="v2", kinds=(Gizmo,), candidate=True).selector)
    for o, owner in [(obj("a"), "v1"), (obj("b", "v2"), "v2"), (obj("c", "v1"), "v1")]:
        assert incumbent.matches_object(o) is (owner == "v1")
        assert candidate.matches_object(o) is (owner == "v2")


def test_the_selector_is_anded_with_the_kinds_own_and_other_kinds_are_untouched() -> None:
    base = CacheOptions(
        namespaces=("ns",), labels="team=a", by_kind={GIZMO: KindOptions(labels="tier=1")}
    )
    options = Rollout(version="v2", kinds=(Gizmo,), candidate=True).cache_options(base)
    assert options.informer_options(GIZMO).labels == f"tier=1,{ROLLOUT_LABEL}=v2"
    assert options.informer_options(DOODAD).labels == "team=a"
    assert options.namespaces == ("ns",)
    plain = Rollout(version="v2", kinds=(GIZMO,), candidate=True).cache_options()
    assert plain.informer_options(GIZMO).labels == f"{ROLLOUT_LABEL}=v2"


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"version": "v2", "kinds": (Gizmo,)}, "exactly one of the two"),
        ({"version": "v2", "kinds": (Gizmo,), "candidate": True, "yields_to": ("v3",)}, "exactly"),
        ({"version": "v 2", "kinds": (Gizmo,), "candidate": True}, "not a label value"),
        ({"version": "v2", "kinds": (), "candidate": True}, "kinds is empty"),
        ({"version": "v1", "kinds": (Gizmo,), "yields_to": ("v1",)}, "itself"),
    ],
)
def test_a_rollout_that_cannot_partition_is_refused(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Rollout(**kwargs)  # type: ignore[arg-type]


def test_doctor_groups_by_version_only_kinds_under_a_rollout() -> None:
    objects = [obj("a"), obj("b", "v2"), obj("c"), obj("x", kind="Other")]
    assert version_of(objects[1]) == "v2"
    assert version_of(objects[0]) is None
    kinds = find_rollouts(objects)
    assert kinds == {"Gizmo.test.setpoint.dev": {INCUMBENT: ["ns/a", "ns/c"], "v2": ["ns/b"]}}
    text = render_rollout(RolloutReport(namespace="ns", kinds=kinds, objects_scanned=4))
    assert "Gizmo.test.setpoint.dev   v2" in text
    empty = render_rollout(RolloutReport(namespace=None))
    assert "no rollout in progress" in empty


def test_the_bare_doctor_line_counts_objects_per_version() -> None:
    kinds = find_rollouts([obj("a"), obj("b", "v2"), obj("c")])
    line = rollout_summary(RolloutReport(namespace=None, kinds=kinds))
    assert (line.check, line.ok) == ("rollout", True)
    assert line.summary == "Gizmo.test.setpoint.dev: (incumbent) 2, v2 1"
    assert rollout_summary(RolloutReport(namespace=None)).summary == "no rollout in progress"
