"""A typed label selector for specs: ``metav1.LabelSelector`` as a setpoint model.

Use it as a field type where users select objects, as Go APIs use ``metav1.LabelSelector``::

    class MirrorSpec(sp.Model):
        namespace_selector: sp.LabelSelector = sp.field(default_factory=sp.LabelSelector)

    namespaces = await ctx.reader.list(
        kinds.Namespace, labels=mirror.spec.namespace_selector.to_selector()
    )

The generated CRD schema carries the server's rules (operators, values by operator, label
keys and values) as CEL, so a bad selector is refused at ``kubectl apply`` time; the model
checks the same rules when it is built or parsed in Python, naming the field. An empty
selector (``{}``) selects everything, as in Kubernetes; to select nothing, make the field
optional and treat ``None`` as nothing.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import model_validator

from setpoint.api.declaration import Rule, field
from setpoint.api.resource import Model
from setpoint.api.validation import label_value_problem, qualified_name_problem

__all__ = ["LabelSelector", "LabelSelectorRequirement"]

_OPERATOR = {"In": "in", "NotIn": "notin"}

# The label rules in CEL, as the API server applies them to a LabelSelector. A qualified
# name: an optional DNS-subdomain prefix and '/', then 1-63 alphanumerics, '-', '_', '.'.
_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_KEY = f"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$"
_VALUE = f"^({_NAME})?$"

LabelValue = Annotated[str, field(max_length=63)]
"""A label value (at most 63 characters; the CEL rules check the characters)."""


@Rule(
    # `values` may be absent (an empty list is not written): has() before size().
    "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0"
    " : !has(self.values) || size(self.values) == 0",
    message="In and NotIn need values; Exists and DoesNotExist take none",
)
@Rule(f"self.key.matches('{_KEY}')", message="key must be a label key (prefix/name)")
class LabelSelectorRequirement(Model):
    """One requirement: the label ``key`` relates to ``values`` by ``operator``."""

    __schema_doc__: ClassVar[str] = (
        "A label key, an operator and values the label's value is compared with."
    )

    key: str = field(max_length=317, description="The label key the requirement applies to.")
    """The label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    """``In``, ``NotIn``, ``Exists`` or ``DoesNotExist``."""
    values: list[LabelValue] = field(
        default_factory=list,
        list_type="atomic",
        max_items=64,
        rules=[Rule(f"self.all(v, v.matches('{_VALUE}'))", message="values must be label values")],
        description="The values, for In and NotIn (at least one); empty otherwise.",
    )
    """The values: at least one for ``In``/``NotIn``, none for ``Exists``/``DoesNotExist``."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        problems = [f"key: {p}" for p in [qualified_name_problem(self.key)] if p]
        problems += [
            f"values[{i}]: {p}"
            for i, value in enumerate(self.values)
            if (p := label_value_problem(value))
        ]
        if self.operator in _OPERATOR and not self.values:
            problems.append(f"values: operator {self.operator} needs at least one value")
        if self.operator not in _OPERATOR and self.values:
            problems.append(f"values: operator {self.operator} takes no values")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_selector(self) -> str:
        """The requirement in the selector syntax of list and watch (``env in (a,b)``)."""
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        return f"{self.key} {_OPERATOR[self.operator]} ({','.join(sorted(set(self.values)))})"

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy the requirement (as the API server decides)."""
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


class LabelSelector(Model):
    """Selects objects by their labels: every ``match_labels`` pair and every expression.

    ``to_selector()`` gives the selector string ``list`` and ``watch`` take
    (``labels=``); ``matches(labels)`` decides in memory. Empty selects everything.
    """

    __schema_doc__: ClassVar[str] = (
        "Selects objects by their labels. Every matchLabels entry and every "
        "matchExpressions requirement must hold; an empty selector selects everything."
    )

    match_labels: dict[str, LabelValue] = field(
        default_factory=dict,
        max_properties=64,
        rules=[
            Rule(
                f"self.all(k, k.matches('{_KEY}') && self[k].matches('{_VALUE}'))",
                message="matchLabels keys must be label keys and values label values",
            )
        ],
        description="Labels an object must have, with these values.",
    )
    """Labels that must be present with exactly these values."""
    match_expressions: list[LabelSelectorRequirement] = field(
        default_factory=list,
        list_type="atomic",
        max_items=32,
        description="Requirements an object's labels must all meet.",
    )
    """Requirements that must all hold."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        problems = []
        for key, value in self.match_labels.items():
            problem = qualified_name_problem(key)
            if problem:
                problems.append(f"matchLabels key {key!r}: {problem}")
            problem = label_value_problem(value)
            if problem:
                problems.append(f"matchLabels[{key!r}]: {problem}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_selector(self) -> str:
        """The selector string for ``list``/``watch`` (``labels=``); ``""`` selects everything."""
        parts = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        parts += [requirement.to_selector() for requirement in self.match_expressions]
        return ",".join(parts)

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )

    @property
    def empty(self) -> bool:
        """Whether it selects everything (no labels, no expressions)."""
        return not self.match_labels and not self.match_expressions
