"""The generated admission policy of a sharding ring (issue 27, finding 5), as data and CLI.

The real API server's verdicts (an edit by another user refused, the operator's passing)
are tests/integration/sharding/test_sharding_policy.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from setpoint.cli.main import main
from setpoint.manager.shardpolicy import (
    ShardedResource,
    policy_name,
    service_account_username,
    sharding_policy,
)

OPERATOR = service_account_username("gizmo-system", "gizmo-controller-manager")


def test_the_policy_guards_the_three_keys_of_the_ring_for_everyone_but_the_operator() -> None:
    """UPDATEs (object and status) of each sharded resource, grouped by API group; the
    operator is matched out; each key must be unchanged; the binding denies."""
    policy, binding = sharding_policy(
        "gizmos",
        [
            ShardedResource.parse("gizmos.test.setpoint.dev"),
            ShardedResource.parse("dials.test.setpoint.dev"),
            ShardedResource.parse("configmaps"),
        ],
        operator=(OPERATOR, OPERATOR, "ops-bot"),
    )
    spec = policy["spec"]
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert policy["metadata"]["name"] == policy_name("gizmos") == "setpoint-sharding-gizmos"
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["test.setpoint.dev"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["gizmos", "gizmos/status", "dials", "dials/status"],
        },
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["configmaps", "configmaps/status"],
        },
    ]
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        "!(request.userInfo.username in "
        "['system:serviceaccount:gizmo-system:gizmo-controller-manager', 'ops-bot'])"
    )
    expressions = [v["expression"] for v in spec["validations"]]
    assert expressions == [
        "object.metadata.?labels[?'shard.sharding.setpoint.dev/gizmos'] == "
        "oldObject.metadata.?labels[?'shard.sharding.setpoint.dev/gizmos']",
        "object.metadata.?labels[?'drain.sharding.setpoint.dev/gizmos'] == "
        "oldObject.metadata.?labels[?'drain.sharding.setpoint.dev/gizmos']",
        "object.metadata.?annotations[?'handover.sharding.setpoint.dev/gizmos'] == "
        "oldObject.metadata.?annotations[?'handover.sharding.setpoint.dev/gizmos']",
    ]
    assert all(OPERATOR in v["message"] for v in spec["validations"])
    assert binding["spec"] == {
        "policyName": "setpoint-sharding-gizmos",
        "validationActions": ["Deny"],
    }


def test_a_quote_in_an_identity_cannot_break_out_of_the_cel_string() -> None:
    """Identities are CEL string literals, escaped."""
    policy, _ = sharding_policy("gizmos", [ShardedResource("", "pods")], operator=("o'brien\\x",))
    assert "['o\\'brien\\\\x']" in policy["spec"]["matchConditions"][0]["expression"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ShardedResource.parse("Widgets.example.com"), "must be <plural>.<group>"),
        (lambda: ShardedResource.parse("widgets.bad_group"), "must be <plural>.<group>"),
        (
            lambda: sharding_policy("Bad", [ShardedResource("", "pods")], operator=("x",)),
            "ring='Bad' must be a DNS label",
        ),
        (lambda: sharding_policy("r", [], operator=("x",)), "at least one sharded resource"),
        (
            lambda: sharding_policy("r", [ShardedResource("", "pods")], operator=()),
            "operator must name the operator's identity",
        ),
        (
            lambda: sharding_policy("r", [ShardedResource("", "pods")], operator="x"),
            "operator must name the operator's identity",
        ),
    ],
)
def test_bad_arguments_name_what_to_fix(call: object, message: str) -> None:
    """Each mistake is a ValueError naming the argument."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()  # type: ignore[operator]


def test_setpoint_generate_sharding_policy_writes_the_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`setpoint generate sharding-policy` writes config/sharding/policy.yaml, then --check
    finds it up to date; a malformed --service-account is an error, not a traceback."""
    argv = [
        "generate",
        "sharding-policy",
        "--ring",
        "gizmos",
        "--resource",
        "gizmos.test.setpoint.dev",
        "--service-account",
        "gizmo-system:gizmo-controller-manager",
        "--output-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    documents = list(yaml.safe_load_all((tmp_path / "sharding/policy.yaml").read_text()))
    documents = [d for d in documents if d]
    assert [d["kind"] for d in documents] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert OPERATOR in documents[0]["spec"]["matchConditions"][0]["expression"]
    assert main([*argv, "--check"]) == 0
    bad = [*argv[:-4], "--service-account", "no-colon", "--output-dir", str(tmp_path)]
    assert main(bad) == 1
    assert "--service-account 'no-colon' must be NAMESPACE:NAME" in capsys.readouterr().err
