"""A test kind whose docstrings use reST markup, as setpoint developers write them.

The CRD generated from it must show its users plain text (tests/unit/crd and
tests/integration/crd/test_crd_explain.py).
"""

from __future__ import annotations

from typing import ClassVar

import setpoint as sp


class GadgetSpec(sp.Model):
    """What the ``Gadget`` should do; see :class:`~setpoint.Model` for the base."""

    size: int = 1
    """How many ``parts`` to make (see :func:`make_parts`)."""


class GadgetStatus(sp.Model):
    """What the controller saw."""

    conditions: list[sp.Condition] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["type"]
    )
    """Ready: every part exists. Degraded: something needs attention."""


class Internal(sp.Model):
    """A note for Python developers: built by :meth:`Gadget.internal`."""

    __schema_doc__: ClassVar[str] = "Extra settings for experts."

    level: int = 0
    """The level."""


@sp.resource(group="descriptions.test.setpoint.dev", version="v1")
class Gadget(sp.Resource):
    """A gadget: ``spec`` says what to build."""

    spec: GadgetSpec
    internal: Internal | None = None
    status: GadgetStatus | None = None
