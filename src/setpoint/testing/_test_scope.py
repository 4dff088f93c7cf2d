"""The namespace the running test owns, from the pytest plugin to ``run_operator``.

The plugin's ``namespace`` fixture names a fresh namespace per test; an operator that
:func:`~setpoint.testing.run_operator` starts during that test watches only it unless told
otherwise, so objects other tests left behind (in namespaces still ``Terminating``) never
reach its reconciler. The plugin sets the name before the test's fixtures run, so an
operator started in a fixture is scoped the same way as one started in the test body.

A module of its own, free of imports: the plugin, loaded in every pytest run of an
environment with setpoint, does not import the manager to share one string.
"""

from __future__ import annotations

__all__ = ["current_test_namespace", "set_test_namespace"]

_current: str | None = None


def set_test_namespace(name: str | None) -> None:
    """Record the namespace of the test now running (``None``: it uses none)."""
    global _current  # noqa: PLW0603 - one value per process: pytest runs one test at a time
    _current = name


def current_test_namespace() -> str | None:
    """The namespace of the test now running, if it uses the ``namespace`` fixture."""
    return _current
