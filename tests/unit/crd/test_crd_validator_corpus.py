"""setpoint's verdicts on the validator corpus: cases where it once disagreed with the server.

Each entry of tests/integration/crd/validator_corpus.json holds a field schema, for an
object a value, and the API server's verdict (read from a real server; the integration
test test_crd_validator_diff.py::test_corpus_matches_the_server checks the recorded
verdicts are still the server's). The offline checks must give the same verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from setpoint.crd import validate_structural
from setpoint.crd.objects import prune_and_default, validate_object

CORPUS_PATH = Path(__file__).parents[2] / "integration" / "crd" / "validator_corpus.json"
CORPUS: list[dict[str, Any]] = json.loads(CORPUS_PATH.read_text())


def root_with(field: dict[str, Any]) -> dict[str, Any]:
    """An openAPIV3Schema whose spec has the one field ``x``."""
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"x": field}}},
    }


def expected_spec(entry: dict[str, Any]) -> dict[str, Any]:
    """The spec the server stores for an accepted object entry."""
    if entry.get("stored_absent"):
        return {}
    return {"x": entry.get("stored", entry["value"])}


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_setpoint_agrees_with_the_recorded_server_verdict(entry: dict[str, Any]) -> None:
    schema = root_with(entry["schema"])
    if entry["kind"] == "schema":
        errors = validate_structural(schema)
        assert (not errors) is entry["server_accepts"], errors
        return
    obj = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "a"},
        "spec": {"x": entry["value"]},
    }
    errors = validate_object(obj, schema)
    assert (not errors) is entry["server_accepts"], errors
    if entry["server_accepts"]:
        assert prune_and_default(obj, schema)["spec"] == expected_spec(entry)


def test_the_corpus_covers_both_verdicts_and_kinds() -> None:
    kinds = {(e["kind"], e["server_accepts"]) for e in CORPUS}
    assert kinds == {("schema", True), ("schema", False), ("object", True), ("object", False)}
    names = [e["name"] for e in CORPUS]
    assert len(names) == len(set(names))
