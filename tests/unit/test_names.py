"""One name per concept: no two different objects are exported under the same name.

Two classes called ``LabelSelector`` (the spec model and the cache's parsed selector), two
``CertificateError`` (bad PEM input and an untrusted server) or two ``Store`` (the cache's and
the fake API server's) make a reader, an import completion or a traceback point at the wrong
one (issue 28). This test walks every setpoint package's and module's ``__all__`` and fails
when one name stands for two objects; the same object re-exported (``setpoint.NotFound`` is
``setpoint.client.errors.NotFound``) is one concept and fine. docs/architecture.md's ownership
table records which package owns which name.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from types import FunctionType

from setpoint.api import kinds
from tests._support.exports import Export, exports

MODULE_HOOKS: dict[str, str] = {
    "register": "each CLI command module's hook that adds its subcommand "
    "(setpoint.cli.main.COMMANDS)",
    "register_checks": "each doctor module's hook that adds its checks to `setpoint doctor`",
    "main": "a module's command-line entry point",
}
"""Function names that several modules define on purpose: one interface, many modules.

Only functions may share these names; a class or constant by the same name still fails."""


GENERATED_MODULES = tuple(
    f"setpoint.api.kinds.{name}" for name in (*kinds.TYPED_MODULES, "scheduling_v1alpha3", "_model")
)
"""The generated models of the built-in kinds (decision 0032, and their private base module)
keep the API's own type names, scoped by group-version as Go's ``appsv1.Deployment`` is:
``core_v1.Secret`` is the typed form of the GVK constant ``kinds.Secret``, and
``_model.Quantity`` the API's quantity, not another concept."""


def _generated(module: str) -> bool:
    return any(module == m or module.startswith(f"{m}.") for m in GENERATED_MODULES)


def _describe(homes: list[Export]) -> str:
    """``a.Name = b.Name (a class)``: one object and every place that exports it."""
    obj = homes[0].obj
    if inspect.ismodule(obj):
        what = f"the module {obj.__name__}"
    elif inspect.isclass(obj):
        what = "a class"
    elif isinstance(obj, FunctionType):
        what = "a function"
    else:
        what = f"a {type(obj).__name__}: {obj!r:.60}"
    places = " = ".join(export.home for export in homes)
    return f"{places} ({what})"


def shared_names(found: tuple[Export, ...]) -> dict[str, list[list[Export]]]:
    """Each name exported for more than one object -> the exports of each object."""
    by_name: dict[str, dict[int, list[Export]]] = defaultdict(dict)
    for export in found:
        by_name[export.name].setdefault(id(export.obj), []).append(export)
    shared: dict[str, list[list[Export]]] = {}
    for name, all_objects in sorted(by_name.items()):
        objects = {
            key: homes
            for key, homes in all_objects.items()
            if any(not _generated(home.module) for home in homes)
        }
        if len(objects) < 2:
            continue
        if name in MODULE_HOOKS and all(
            isinstance(homes[0].obj, FunctionType) for homes in objects.values()
        ):
            continue
        shared[name] = list(objects.values())
    return shared


def test_no_two_objects_share_a_public_name() -> None:
    shared = shared_names(exports())
    problems = [
        f"{name!r} names {len(objects)} different objects: "
        + "; ".join(_describe(homes) for homes in objects)
        for name, objects in shared.items()
    ]
    assert not problems, (
        "one name per concept: give each of these a name by its role, and record it in "
        "docs/architecture.md's ownership table:\n" + "\n".join(problems)
    )


def test_a_shared_name_is_reported_with_both_homes() -> None:
    """The check itself: two objects under one name are found, one object twice is not."""

    class First:
        pass

    class Second:
        pass

    found = (
        Export("setpoint.a", "Thing", First),
        Export("setpoint", "Thing", First),
        Export("setpoint.b", "Thing", Second),
        Export("setpoint.c", "Other", First),
        Export("setpoint.x", "register", _describe),
        Export("setpoint.y", "register", shared_names),
        Export("setpoint.z", "main", First),
        Export("setpoint.w", "main", shared_names),
    )
    shared = shared_names(found)
    assert sorted(shared) == ["Thing", "main"]
    homes = [[export.home for export in exports_] for exports_ in shared["Thing"]]
    assert homes == [["setpoint.a.Thing", "setpoint.Thing"], ["setpoint.b.Thing"]]
    assert _describe(shared["Thing"][0]) == "setpoint.a.Thing = setpoint.Thing (a class)"
