"""Differential test: setpoint's schema checks and the API server's, on generated cases.

tests/_support/validator_diff.py draws field schemas and values from a seed. All the
schemas of a run go into one CRD (one property of spec each); the server's answer to a
dry-run create of that CRD says which schemas (defaults included) it refuses, compared
with :func:`setpoint.crd.validate_structural`. The accepted ones are installed, and each
value is sent as an object (server-side dry-run create), compared with
:func:`setpoint.crd.objects.validate_object` (accept or refuse) and, when both accept,
with :func:`setpoint.crd.objects.prune_and_default` (the stored spec).

SETPOINT_VALIDATOR_DIFF_CASES (500 here, in CRDs of at most 500 each) and
SETPOINT_VALIDATOR_DIFF_SEED (fixed here; a random one from ``make test-validator-diff``)
size a run. A disagreement fails the test
with the case; each one found becomes an entry of validator_corpus.json.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.client import Client
from setpoint.client.errors import ApiError, Invalid
from setpoint.crd import validate_structural
from setpoint.crd.objects import prune_and_default, validate_object
from setpoint.testing.waits import eventually
from tests._support.crd_server import is_established
from tests._support.validator_diff import Case, Generator

CASES = int(os.environ.get("SETPOINT_VALIDATOR_DIFF_CASES", "500"))
BATCH = 500
SEED = int(os.environ.get("SETPOINT_VALIDATOR_DIFF_SEED", "31"))
CORPUS = Path(__file__).with_name("validator_corpus.json")
_CASE_IN_PATH = re.compile(r"properties\[spec\]\.properties\[(c\d+)\]")


def crd_for(group: str, properties: dict[str, Any]) -> dict[str, Any]:
    """One CRD whose spec has the given properties."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"diffs.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "diffs",
                "singular": "diff",
                "kind": "Diff",
                "listKind": "DiffList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root_schema(properties)},
                }
            ],
        },
    }


def root_schema(properties: dict[str, Any]) -> dict[str, Any]:
    """The openAPIV3Schema holding ``properties`` under spec."""
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}}


async def server_refused_schemas(k8s: Client, group: str, props: dict[str, Any]) -> set[str]:
    """The case names whose schema the server's dry-run create of the CRD refuses."""
    try:
        await k8s.create(crd_for(group, props), dry_run=True)
    except Invalid as exc:
        found = {m for c in exc.causes for m in _CASE_IN_PATH.findall(c.field or "")}
        found |= set(_CASE_IN_PATH.findall(str(exc)))
        assert found, f"the server refused the CRD for no case: {exc}"
        return found
    return set()


def setpoint_refused_schemas(props: dict[str, Any]) -> set[str]:
    """The case names whose schema setpoint's structural check refuses."""
    refused = set()
    for error in validate_structural(root_schema(props)):
        path = error.schema_path
        if len(path) >= 4 and path[:3] == ("properties", "spec", "properties"):
            refused.add(str(path[3]))
    return refused


async def server_verdict(k8s: Client, obj: dict[str, Any]) -> tuple[bool, Any]:
    """(accepted, the stored spec or the error message) from a dry-run create."""
    try:
        created = await k8s.create(obj, dry_run=True)
    except Invalid as exc:
        return False, str(exc)
    except ApiError as exc:  # a 400: the body could not be decoded
        return False, f"{exc.code}: {exc}"
    return True, created.get("spec")


def setpoint_verdict(obj: dict[str, Any], schema: dict[str, Any]) -> tuple[bool, Any]:
    """(accepted, the stored spec or the errors) from setpoint's offline checks."""
    errors = validate_object(obj, schema)
    if errors:
        return False, "; ".join(f"{'.'.join(map(str, e.schema_path))}: {e.message}" for e in errors)
    return True, prune_and_default(obj, schema).get("spec")


async def install(k8s: Client, crd: dict[str, Any]) -> None:
    """Create ``crd`` and wait until it is Established and its kind is served."""
    await k8s.create(crd)
    name = crd["metadata"]["name"]

    async def established() -> bool | None:
        return True if is_established(await k8s.get(kinds.CustomResourceDefinition, name)) else None

    await eventually(established, timeout=60, description=f"CRD {name} Established")


async def run_objects(
    k8s: Client, namespace: str, group: str, schema: dict[str, Any], objects: list[Any]
) -> list[dict[str, Any]]:
    """Send each (case name, value) as an object; return the disagreements."""
    limit = asyncio.Semaphore(8)
    found: list[dict[str, Any]] = []

    async def one(index: int, name: str, value: Any) -> None:
        obj = {
            "apiVersion": f"{group}/v1",
            "kind": "Diff",
            "metadata": {"name": f"o{index}", "namespace": namespace},
            "spec": {name: value},
        }
        async with limit:
            server = await server_verdict(k8s, obj)
        ours = setpoint_verdict(obj, schema)
        if server[0] != ours[0] or (server[0] and server[1] != ours[1]):
            found.append(
                {
                    "kind": "object",
                    "schema": schema["properties"]["spec"]["properties"][name],
                    "value": value,
                    "server": {"accepted": server[0], "said": server[1]},
                    "setpoint": {"accepted": ours[0], "said": ours[1]},
                }
            )

    await asyncio.gather(*(one(i, name, value) for i, (name, value) in enumerate(objects)))
    return found


async def differential_run(k8s: Client, namespace: str, cases: list[Case]) -> list[dict[str, Any]]:
    """Compare the verdicts on ``cases``; return every disagreement."""
    group = f"d{uuid.uuid4().hex[:8]}.diff.setpoint.dev"
    props = {f"c{i}": case.schema for i, case in enumerate(cases)}
    disagreements: list[dict[str, Any]] = []
    server_refused = await server_refused_schemas(k8s, group, props)
    ours_refused = setpoint_refused_schemas(props)
    for name in sorted(server_refused ^ ours_refused):
        disagreements.append(
            {
                "kind": "schema",
                "schema": props[name],
                "server": {"accepted": name not in server_refused},
                "setpoint": {"accepted": name not in ours_refused},
            }
        )
    accepted = {k: v for k, v in props.items() if k not in server_refused | ours_refused}
    crd = crd_for(group, accepted)
    await install(k8s, crd)
    try:
        await eventually(
            functools.partial(k8s.resource_info, _gvk(group)),
            timeout=30,
            description="Diff discoverable",
        )
        objects = [
            (name, value)
            for i, case in enumerate(cases)
            if (name := f"c{i}") in accepted
            for value in case.values
        ]
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        disagreements += await run_objects(k8s, namespace, group, schema, objects)
    finally:
        await k8s.delete(kinds.CustomResourceDefinition, crd["metadata"]["name"])
    return disagreements


def _gvk(group: str) -> Any:
    from setpoint.api.gvk import GroupVersionKind

    return GroupVersionKind(group, "v1", "Diff")


def _report(disagreements: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(d, sort_keys=True, default=str) for d in disagreements)


@pytest.mark.integration
async def test_validator_agrees_with_the_server_on_generated_cases(
    k8s: Client, namespace: str
) -> None:
    """setpoint's verdict on generated schemas and objects matches the API server's.

    One CRD carries every generated field schema; the server's refusals of it (dry-run
    create) are compared with validate_structural's, then each generated value is sent
    as an object (dry-run create) and compared with validate_object's verdict and, when
    both accept, with prune_and_default's stored spec. Size and seed come from
    SETPOINT_VALIDATOR_DIFF_CASES and SETPOINT_VALIDATOR_DIFF_SEED.
    """
    disagreements: list[dict[str, Any]] = []
    for batch, start in enumerate(range(0, CASES, BATCH)):
        # One CRD per batch of BATCH cases (a CRD of thousands of fields gets too large);
        # batch b draws from seed SEED + b.
        cases = Generator(SEED + batch).cases(min(BATCH, CASES - start))
        found = await differential_run(k8s, namespace, cases)
        disagreements += [{**d, "seed": SEED + batch} for d in found]
    assert not disagreements, f"{len(disagreements)} disagreements\n" + _report(disagreements)


@pytest.mark.integration
async def test_python_type_constraints_agree_with_the_server(k8s: Client, namespace: str) -> None:
    """Schemas generated from Python types with constraints: the server's verdicts are setpoint's.

    tests/_support/validator_diff.py's TypeCases draws sp.Model types that declare
    exactly_one_of, at_most_one_of, sp.Constraint junctors (anyOf/allOf/not with required
    fields, nested properties by Python name) on the model and one_of/any_of/all_of/not_
    and formats on fields; `setpoint generate crd`'s schema of each goes into one CRD the
    server must accept, and objects setting random subsets of the fields are compared as
    in the generated-case test (verdict, then stored spec).
    """
    from tests._support.validator_diff import TypeCases

    cases = TypeCases(SEED).cases(60)
    disagreements = await differential_run(k8s, namespace, cases)
    assert not disagreements, f"{len(disagreements)} disagreements\n" + _report(disagreements)


@pytest.mark.integration
async def test_corpus_matches_the_server(k8s: Client, namespace: str) -> None:
    """Every verdict recorded in validator_corpus.json is still the API server's.

    The corpus holds the cases where setpoint once disagreed with the server (the unit
    test test_crd_validator_corpus.py holds setpoint to them offline). Here each schema
    entry goes into one CRD sent as a dry-run create, and each object entry is sent as an
    object of an installed CRD: the server must accept or refuse as recorded, and store
    the recorded spec.
    """
    corpus = json.loads(CORPUS.read_text())
    group = f"c{uuid.uuid4().hex[:8]}.diff.setpoint.dev"
    schemas = [e for e in corpus if e["kind"] == "schema"]
    refused = await server_refused_schemas(
        k8s, group, {f"c{i}": e["schema"] for i, e in enumerate(schemas)}
    )
    wrong = [
        e["name"] for i, e in enumerate(schemas) if (f"c{i}" not in refused) != e["server_accepts"]
    ]
    objects = [e for e in corpus if e["kind"] == "object"]
    crd = crd_for(group, {f"c{i}": e["schema"] for i, e in enumerate(objects)})
    await install(k8s, crd)
    try:
        await eventually(
            functools.partial(k8s.resource_info, _gvk(group)), timeout=30, description="Diff"
        )
        for i, entry in enumerate(objects):
            obj = {
                "apiVersion": f"{group}/v1",
                "kind": "Diff",
                "metadata": {"name": f"o{i}", "namespace": namespace},
                "spec": {f"c{i}": entry["value"]},
            }
            accepted, said = await server_verdict(k8s, obj)
            if accepted != entry["server_accepts"]:
                wrong.append(f"{entry['name']}: {said}")
            elif accepted:
                stored = (
                    {} if entry.get("stored_absent") else {"x": entry.get("stored", entry["value"])}
                )
                mine = {"x": said[f"c{i}"]} if f"c{i}" in said else {}
                if mine != stored:
                    wrong.append(f"{entry['name']}: stored {said}")
    finally:
        await k8s.delete(kinds.CustomResourceDefinition, crd["metadata"]["name"])
    assert not wrong, wrong
