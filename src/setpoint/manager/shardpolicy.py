"""An admission policy that keeps a ring's labels and hand-over records the operator's own.

Sharding (decision 0011) records who reconciles each object in its labels and annotations:
the shard label, the drain label and the hand-over record. Replicas act only on a label the
record confirms, so a label edited by anyone else moves nothing (the sharder repairs it);
this policy adds the second guard: the API server refuses every change of those three keys
by anyone but the operator's own identities (its ServiceAccount), whoever they are, cluster
admins included (an admission policy applies to ``system:masters`` too, unlike RBAC). It is
a ``ValidatingAdmissionPolicy`` with its ``ValidatingAdmissionPolicyBinding``
(``admissionregistration.k8s.io/v1``, Kubernetes 1.30 or later), written in CEL: no webhook
to run, no certificate, nothing on the write path but the API server.

``setpoint generate sharding-policy`` writes it; :func:`sharding_policy` builds it as data::

    policy, binding = sharding_policy(
        "widgets",
        [ShardedResource("example.com", "widgets")],
        operator=(service_account_username("widgets-system", "widgets-controller-manager"),),
    )

Expected Flow:
    1. An ``UPDATE`` (of the object or its ``status``) of a sharded resource arrives.
    2. The match condition skips requests made by one of ``operator`` (the sharder in the
       leader, and each replica's acknowledgement, write these keys).
    3. Otherwise each of the three keys must be the same in ``object`` and ``oldObject``
       (present with the same value, or absent in both); if one differs the request is
       refused (``403 Forbidden``) with a message naming the key and the identity allowed.

Guarantees:
    - Nobody but ``operator`` can add, change or remove the shard label, the drain label or
      the hand-over record of an existing object of the listed resources. With it, a
      replica's record check cannot be fooled by a forged record either.
    - Other changes (spec, other labels and annotations, finalizers, deletion) pass.

Caveats:
    - ``CREATE`` is not checked: an object may be created with these keys (restored from a
      backup, copied from another object). That is harmless: a record carries the object's
      UID, which does not exist before it is created, so it confirms nothing, and the
      sharder assigns the object as if it were new.
    - The allowed identity is a literal username: kustomize's ``namespace`` and
      ``namePrefix`` do not rewrite it, so pass the final ServiceAccount's namespace and
      name. A renamed ServiceAccount is refused until the policy is regenerated.
    - A policy that is not installed protects nothing; replicas still never act on a label
      the record does not confirm.

Errors:
    ValueError: a ring that is not a DNS label, no resources, or no operator identity (or a
        bare string instead of a sequence of them); each message names the argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from setpoint.api.meta import JsonObject
from setpoint.api.validation import is_dns1123_label, is_dns1123_subdomain
from setpoint.manager.sharding import drain_label, handover_annotation, shard_label

__all__ = [
    "ShardedResource",
    "policy_name",
    "service_account_username",
    "sharding_policy",
]

API_VERSION = "admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class ShardedResource:
    """A resource whose objects a ring shards, as admission rules name it."""

    group: str
    """The API group (``""`` for the core group)."""
    resource: str
    """The plural resource name, e.g. ``widgets``."""

    @classmethod
    def parse(cls, text: str) -> ShardedResource:
        """``<plural>.<group>`` (``widgets.example.com``), or ``<plural>`` for the core group.

        Raises:
            ValueError: not of that form.

        """
        resource, _, group = text.strip().partition(".")
        if not is_dns1123_label(resource) or (group and not is_dns1123_subdomain(group)):
            raise ValueError(
                f"resource {text!r} must be <plural>.<group> (e.g. widgets.example.com) or "
                "<plural> for the core group, in lowercase"
            )
        return cls(group, resource)


def service_account_username(namespace: str, name: str) -> str:
    """The username the API server gives a ServiceAccount's tokens.

    ``system:serviceaccount:<namespace>:<name>``.
    """
    return f"system:serviceaccount:{namespace}:{name}"


def policy_name(ring: str) -> str:
    """The policy's (and its binding's) name: ``setpoint-sharding-<ring>``."""
    return f"setpoint-sharding-{ring}"


def _cel_string(text: str) -> str:
    """``text`` as a CEL string literal (single-quoted, backslash and quote escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _unchanged(field: str, key: str) -> str:
    """CEL: ``metadata.<field>[key]`` is the same in the object and the old object."""
    k = _cel_string(key)
    return f"object.metadata.?{field}[?{k}] == oldObject.metadata.?{field}[?{k}]"


def sharding_policy(
    ring: str,
    resources: Sequence[ShardedResource],
    *,
    operator: Sequence[str],
) -> tuple[JsonObject, JsonObject]:
    """The ``ValidatingAdmissionPolicy`` and its binding for ``ring`` (module docstring).

    Args:
        ring: The ring's name (``ShardingOptions.ring``).
        resources: The resources of the ring's sharded kinds.
        operator: Usernames allowed to change the keys: the operator's ServiceAccount
            (:func:`service_account_username`), and any other identity that runs the sharder.

    Raises:
        ValueError: see the module docstring.

    """
    if not is_dns1123_label(ring) or len(ring) > 50:
        raise ValueError(
            f"sharding_policy: ring={ring!r} must be a DNS label of at most 50 characters "
            "(ShardingOptions.ring)"
        )
    if not resources:
        raise ValueError("sharding_policy: resources must name at least one sharded resource")
    users = () if isinstance(operator, str) else tuple(dict.fromkeys(operator))
    if not users or not all(isinstance(u, str) and u.strip() for u in users):
        raise ValueError(
            "sharding_policy: operator must name the operator's identity, e.g. "
            "system:serviceaccount:<namespace>:<service account>"
        )
    by_group: dict[str, list[str]] = {}
    for item in resources:
        plurals = by_group.setdefault(item.group, [])
        for name in (item.resource, f"{item.resource}/status"):
            if name not in plurals:
                plurals.append(name)
    allowed = ", ".join(users)
    validations = []
    for field, key, what in (
        ("labels", shard_label(ring), "label"),
        ("labels", drain_label(ring), "label"),
        ("annotations", handover_annotation(ring), "annotation"),
    ):
        validations.append(
            {
                "expression": _unchanged(field, key),
                "message": (
                    f"the {what} {key} is written only by the operator that shards these "
                    f"objects ({allowed}): it records which replica reconciles the object "
                    f"(setpoint sharding, ring {ring}). Leave it as it is; `setpoint doctor "
                    "shards` shows the assignment"
                ),
                "reason": "Forbidden",
            }
        )
    name = policy_name(ring)
    policy: JsonObject = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": plurals,
                    }
                    for group, plurals in by_group.items()
                ]
            },
            "matchConditions": [
                {
                    "name": "not-the-operator",
                    "expression": "!(request.userInfo.username in ["
                    + ", ".join(_cel_string(u) for u in users)
                    + "])",
                }
            ],
            "validations": validations,
        },
    }
    binding: JsonObject = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return policy, binding
