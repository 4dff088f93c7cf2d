"""Parity: label selectors (every operator) and field selectors."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from setpoint.api import kinds
from setpoint.client.errors import BadRequest

if TYPE_CHECKING:
    from tests._support.parity import Api

LABELLED = {
    "l0": {"app": "web", "tier": "fe", "rank": "3"},
    "l1": {"app": "db", "rank": "10"},
    "l2": {"tier": "be", "app": ""},
    "l3": {},
}

CASES = [
    ("app=web", {"l0"}),
    ("app==web", {"l0"}),
    ("app!=web", {"l1", "l2", "l3"}),
    ("app in (web,db)", {"l0", "l1"}),
    ("app in ()", {"l2"}),  # "()" is the set holding the empty string
    ("app notin ()", {"l0", "l1", "l3"}),
    ("app notin (web)", {"l1", "l2", "l3"}),
    ("app", {"l0", "l1", "l2"}),
    ("!app", {"l3"}),
    ("app,tier", {"l0", "l2"}),
    ("app in (web), tier=fe", {"l0"}),
    ("tier notin (fe,be)", {"l1", "l3"}),
    ("app=", {"l2"}),
    ("app!=", {"l0", "l1", "l3"}),
    ("rank>5", {"l1"}),
    ("rank<5", {"l0"}),
    ("", {"l0", "l1", "l2", "l3"}),
]


async def _select(api: Api, selector: str) -> set[str]:
    listed = await api.client.list(kinds.ConfigMap, namespace=api.namespace, labels=selector)
    return {o["metadata"]["name"] for o in listed if o["metadata"]["name"] in LABELLED}


async def test_every_label_selector_operator(api: Api) -> None:
    """Each label-selector operator selects the same objects on the fake and the server.

    Covers =, ==, !=, in, notin, exists, !exists, the integer comparisons, an
    empty value and `()`. != and notin also match objects without the label;
    `key=` and `key in ()` match only an empty value.
    """
    for name, labels in LABELLED.items():
        await api.client.create(api.cm(name, labels=labels))
    for selector, expected in CASES:
        assert await _select(api, selector) == expected, selector
    mapping = await api.client.list(
        kinds.ConfigMap, namespace=api.namespace, labels={"app": "web", "tier": "fe"}
    )
    assert [o["metadata"]["name"] for o in mapping] == ["l0"]


SIZED = {"n0": "1_000", "n1": "007", "n2": "99999999999999999999", "n4": "12"}


async def test_integer_comparisons_read_numbers_as_go_does(api: Api) -> None:
    """`>` and `<` read 64-bit decimal integers only, on the fake and the server alike.

    Python's int() would read "1_000" as 1000 and a 20-digit value exactly; the API server
    (strconv.ParseInt) reads neither, so such labels match no comparison and such bounds
    are a 400 (issue 18, item 11).
    """
    for name, size in SIZED.items():
        await api.client.create(api.cm(name, labels={"size": size}))

    async def sized(selector: str) -> set[str]:
        listed = await api.client.list(kinds.ConfigMap, namespace=api.namespace, labels=selector)
        return {o["metadata"]["name"] for o in listed if o["metadata"]["name"] in SIZED}

    assert await sized("size>5") == {"n1", "n4"}
    assert await sized("size<10") == {"n1"}
    assert await sized("size<9223372036854775807") == {"n1", "n4"}
    for bad in ("size>1_000", "size>99999999999999999999", "size<9223372036854775808"):
        with pytest.raises(BadRequest) as info:
            await sized(bad)
        assert "the value must be an integer" in info.value.status["message"], bad


@pytest.mark.parametrize(
    ("selector", "complaint"),
    [
        ("bad selector!", "found 'selector', expected: in, notin, =, ==, !=, gt, lt"),
        ("x in (a b)", "found 'b', expected: ',' or ')'"),
        ("app=web=x", "found '=', expected: ',' or 'end of string'"),
        ("!app=web", "found '=', expected: ',' or 'end of string'"),
        ("app in web", "found 'web' expected: '('"),
    ],
)
async def test_malformed_label_selectors_are_bad_requests(
    api: Api, selector: str, complaint: str
) -> None:
    """A malformed label selector is 400 Bad Request, with the parser's complaint."""
    with pytest.raises(BadRequest) as info:
        await api.client.list(kinds.ConfigMap, namespace=api.namespace, labels=selector)
    assert complaint in info.value.status["message"]


async def test_field_selectors(crds: Api) -> None:
    """metadata.name and metadata.namespace select; other fields are refused (400).

    A built-in kind names the fields it supports; a custom resource says
    `field label not supported`. Set-based syntax is refused.
    """
    c, ns = crds.client, crds.namespace
    for name in ("f1", "f2"):
        await c.create(crds.cm(name, labels={"fields": "yes"}))
        await c.create(crds.obj(crds.gizmo, name, spec={}))

    async def names(kind: object, fields: str) -> set[str]:
        listed = await c.list(kind, namespace=ns, fields=fields, labels=None)
        return {o["metadata"]["name"] for o in listed if o["metadata"]["name"] in ("f1", "f2")}

    assert await names(kinds.ConfigMap, "metadata.name=f1") == {"f1"}
    assert await names(kinds.ConfigMap, "metadata.name==f2") == {"f2"}
    assert await names(kinds.ConfigMap, "metadata.name!=f1") == {"f2"}
    assert await names(kinds.ConfigMap, f"metadata.namespace={ns}") == {"f1", "f2"}
    assert await names(kinds.ConfigMap, f"metadata.namespace!={ns}") == set()
    assert await names(crds.gizmo, "metadata.name=f2") == {"f2"}

    with pytest.raises(BadRequest) as builtin:
        await c.list(kinds.ConfigMap, namespace=ns, fields="spec.x=1")
    assert builtin.value.status["message"] == (
        '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    with pytest.raises(BadRequest) as custom:
        await c.list(crds.gizmo, namespace=ns, fields="spec.a=1")
    assert custom.value.status["message"] == "field label not supported: spec.a"
    with pytest.raises(BadRequest):
        await c.list(kinds.ConfigMap, namespace=ns, fields="metadata.name in (f1)")
