"""Spec fields named like observed state: ``generate crd`` and ``crd diff`` warn (issue 32)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

import setpoint as sp
from setpoint.cli import crd as crd_command
from setpoint.cli import generate
from setpoint.crd import crd_for
from setpoint.crd.runtime_fields import looks_like_observed_state, runtime_field_warnings


class Step(sp.Model):
    """One step."""

    name: str
    """Its name."""
    finished_timestamp: str | None = None
    """When it finished."""


class JobSpec(sp.Model):
    """What a Job asks for."""

    schedule: str | None = None
    """Cron."""
    last_run_time: str | None = None
    """When it last ran."""
    start_time: str | None = None
    """When to start the first run.

    +setpoint:desired-state
    """
    steps: list[Step] = sp.field(default_factory=list)
    """Steps."""
    phase: str | None = None
    """A phase."""


class JobStatus(sp.Model):
    """What was observed."""

    last_run_time: str | None = None
    """Observed, where it belongs."""
    phase: str | None = None
    """Observed, where it belongs."""


@sp.resource(group="rt.test.setpoint.dev", version="v1")
class Job(sp.Resource):
    """A kind with observed state in its spec."""

    spec: JobSpec | None = None
    status: JobStatus | None = None


def old_job() -> dict[str, Any]:
    """Job's CRD before lastRunTime and steps were added."""
    crd = crd_for(Job)
    properties = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for name in ("lastRunTime", "steps"):
        del properties["spec"]["properties"][name]
    return crd


def run(argv: list[str]) -> int:
    """Run ``setpoint generate ...`` or ``setpoint crd ...`` (just those two commands)."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(required=True)
    generate.register(sub)
    crd_command.register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.mark.parametrize(
    ("name", "flagged"),
    [
        ("lastRunTime", True),
        ("creationTimestamp", True),
        ("observedGeneration", True),
        ("phase", True),
        ("conditions", True),
        ("time", True),
        ("runtime", False),
        ("timeout", False),
        ("Time", False),
        ("phases", False),
        ("schedule", False),
    ],
)
def test_names_that_read_as_observed_state(name: str, flagged: bool) -> None:
    assert looks_like_observed_state(name) is flagged


def test_spec_fields_are_flagged_status_fields_and_opted_out_ones_are_not() -> None:
    warnings = runtime_field_warnings([crd_for(Job)])
    assert [(w.version, w.path) for w in warnings] == [
        ("v1", ".spec.lastRunTime"),
        ("v1", ".spec.phase"),
        ("v1", ".spec.steps[*].finishedTimestamp"),
    ]
    assert "+setpoint:desired-state" in str(warnings[0])


def test_only_fields_new_since_the_old_crd_are_flagged() -> None:
    warnings = runtime_field_warnings([crd_for(Job)], known=[old_job()])
    assert [w.path for w in warnings] == [".spec.lastRunTime", ".spec.steps[*].finishedTimestamp"]


def test_generate_crd_and_crd_diff_print_the_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(old_job()))
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(crd_for(Job)))
    run(["crd", "diff", str(old), str(new)])
    err = capsys.readouterr().err
    assert "warning: jobs.rt.test.setpoint.dev v1 .spec.lastRunTime" in err
    assert ".spec.phase:" not in err
    assert run(["generate", "crd", __name__, "--output-dir", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert ".spec.phase: the name looks like observed state" in err
    assert ".spec.startTime" not in err
