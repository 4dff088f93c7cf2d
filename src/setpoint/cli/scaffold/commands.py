"""``setpoint init``, ``setpoint create api`` and ``setpoint create webhook``.

Each command works in three steps, so a mistake never leaves a project half-written:

1. check every name and the project's state (``PROJECT``), raising before any file is touched;
2. compute every file it would write, in memory, and compare each with the disk
   (:func:`setpoint.cli.scaffold.files.plan_files`);
3. write them all, or none when a file a person changed would be overwritten (the error
   shows the diff; ``force=True`` overwrites).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from setpoint.api.declaration import version_priority
from setpoint.cli.scaffold.files import FilePlan, ScaffoldConflict, apply, plan_files
from setpoint.cli.scaffold.layout import admission_files, api_files, project_files, wiring_files
from setpoint.cli.scaffold.names import (
    ResourceNames,
    ScaffoldNameError,
    check_domain,
    check_group,
    check_kind,
    check_package,
    check_project_name,
    check_version,
    package_for,
)
from setpoint.cli.scaffold.project import (
    PROJECT_FILE,
    Project,
    ProjectFileError,
    ScaffoldedResource,
    Webhooks,
    digest,
)

__all__ = [
    "DEFAULT_DOMAIN",
    "ScaffoldResult",
    "SetpointSource",
    "create_api",
    "create_webhook",
    "default_hub",
    "init",
    "setpoint_source",
]

DEFAULT_DOMAIN = "example.com"
"""The domain ``setpoint init`` uses without ``--domain`` (groups are ``<group>.<domain>``)."""


@dataclass(frozen=True, slots=True)
class SetpointSource:
    """How a generated project depends on setpoint."""

    install: str
    """``pip install`` arguments, shell-quoted (the Makefile's ``SETPOINT``)."""
    requirement: str
    """The requirement in the project's ``pyproject.toml``."""
    testing_requirement: str
    """The same with the ``testing`` extra (the project's ``dev`` extra)."""
    version: str
    """The setpoint version that scaffolded the project."""


def setpoint_source(local: Path | None = None) -> SetpointSource:
    """Where the generated project gets setpoint from.

    ``local`` (``--setpoint-from``) is a wheel file or a setpoint checkout (installed
    editable). Without it, the running setpoint decides: installed from a wheel file, that
    file; installed editable from a checkout, that checkout; otherwise the same version
    from the package index.

    Raises:
        ScaffoldNameError: ``local`` is neither a ``.whl`` file nor a directory with a
            ``pyproject.toml``.

    """
    try:
        version = metadata.version("setpoint")
    except metadata.PackageNotFoundError:
        version = ""
    if version and "unknown" not in version:
        major, minor = [*version.split("."), "0"][:2]
        bounds = f">={version},<{major}.{int(minor) + 1}" if major == "0" else f">={version}"
    else:
        bounds = ""
    requirement, testing = f"setpoint{bounds}", f"setpoint[testing]{bounds}"
    if local is not None:
        install = _local_install(local.expanduser().resolve())
    else:
        install = _installed_from() or shlex.quote(
            f"setpoint[testing]=={version}" if version else "setpoint[testing]"
        )
    return SetpointSource(install, requirement, testing, version)


def _local_install(path: Path) -> str:
    if path.is_file() and path.suffix == ".whl":
        return shlex.quote(f"{path}[testing]")
    if path.is_dir() and (path / "pyproject.toml").is_file():
        return "-e " + shlex.quote(f"{path}[testing]")
    raise ScaffoldNameError(
        f"--setpoint-from {str(path)!r} is neither a setpoint wheel (.whl) nor a setpoint "
        "checkout (a directory with pyproject.toml)"
    )


def _installed_from() -> str | None:
    """The wheel file or checkout the running setpoint was installed from (PEP 610)."""
    try:
        text = metadata.distribution("setpoint").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    url = str(info.get("url", ""))
    if not url.startswith("file://"):
        return None
    path = Path(url.removeprefix("file://"))
    if (info.get("dir_info") or {}).get("editable") or path.is_dir():
        return "-e " + shlex.quote(f"{path}[testing]")
    return shlex.quote(f"{path}[testing]") if path.suffix == ".whl" else None


@dataclass(frozen=True, slots=True)
class ScaffoldResult:
    """What a command did to each file."""

    files: list[FilePlan]
    """Every file the command produced, with its status."""
    next_steps: list[str]
    """What to run or write next."""


def _finish(
    root: Path, project: Project, outputs: dict[str, str], *, force: bool, next_steps: list[str]
) -> ScaffoldResult:
    plans = plan_files(root, outputs, project.files)
    recorded = dict(project.files)
    recorded.update({path: digest(content.encode()) for path, content in outputs.items()})
    final = replace(project, files=recorded)
    project_text = final.dump()
    plans += plan_files(root, {PROJECT_FILE: project_text}, {PROJECT_FILE: _current_digest(root)})
    apply(root, plans, force=force)
    return ScaffoldResult(plans, next_steps)


def _current_digest(root: Path) -> str:
    # PROJECT is setpoint's own: always rewritten (a change to it is a change of the record).
    path = root / PROJECT_FILE
    return digest(path.read_bytes()) if path.is_file() else ""


def init(
    root: Path,
    *,
    domain: str | None = None,
    name: str | None = None,
    setpoint_from: Path | None = None,
    force: bool = False,
) -> ScaffoldResult:
    """Scaffold a new project in ``root`` (see the module docstring for the guarantees).

    Run again with the same names, it changes nothing; with other names it refuses.

    Raises:
        ScaffoldNameError: a name breaks its rule.
        ProjectFileError: ``root`` holds a project with other names.
        ScaffoldConflict: a file would overwrite content setpoint did not write.

    """
    root = root.resolve()
    project_name = check_project_name(name if name is not None else _default_name(root))
    package = check_package(package_for(project_name))
    domain = check_domain(domain if domain is not None else DEFAULT_DOMAIN)
    source = setpoint_source(setpoint_from)
    if (root / PROJECT_FILE).is_file():
        existing = Project.load(root)
        if (existing.name, existing.domain) != (project_name, domain):
            raise ProjectFileError(
                f"{root} is already the project {existing.name!r} (domain {existing.domain!r}); "
                "`setpoint init` once per project, then `setpoint create ...`"
            )
        project = existing
        if setpoint_from is not None:
            project = replace(project, setpoint_install=source.install)
    else:
        project = Project(
            name=project_name,
            domain=domain,
            package=package,
            setpoint_version=source.version,
            setpoint_install=source.install,
        )
    outputs = project_files(project, source.requirement, source.testing_requirement)
    outputs.update(wiring_files(project))
    return _finish(
        root,
        project,
        outputs,
        force=force,
        next_steps=[
            "setpoint create api --group <group> --version v1 --kind <Kind>",
            "make test    # lint, type checks and tests",
            "make run     # the operator on a local control plane",
        ],
    )


def _default_name(root: Path) -> str:
    candidate = root.name.lower().replace("_", "-")
    try:
        return check_project_name(candidate)
    except ScaffoldNameError:
        raise ScaffoldNameError(
            f"the directory name {root.name!r} is not a usable project name; pass --name, "
            "such as --name memcached-operator"
        ) from None


def create_api(
    root: Path,
    *,
    group: str,
    version: str,
    kind: str,
    namespaced: bool | None = None,
    hub: str | None = None,
    force: bool = False,
) -> ScaffoldResult:
    """Add a kind, or another version of a kind, to the project in ``root``.

    The first version of a kind gets its types, a controller wired into the manager, a
    FakeClient unit test, an integration test and a sample; it is the kind's hub (and
    storage version). A later version has two outcomes, chosen by ``hub``:

    - ``hub`` is the new version (the default when it is the newest version of the kind,
      in Kubernetes' order: ``v2`` > ``v1`` > ``v1beta1`` > ``v1alpha1``, which is what the
      evolution guide and the tenants example do): the new version gets the hub's types,
      the controller and its tests move to it, and the former hub (and every spoke of it)
      becomes a spoke of the new version, its module rewritten with converter stubs;
    - ``hub`` is the current hub (the default when the new version is older than it): the
      new version is a spoke of it, nothing else changes.

    Every spoke's converters are stubs that raise ``NotImplementedError`` until written,
    with a conversion test that fails until then. Moving the hub rewrites files the kind's
    earlier commands wrote; a file changed since is a conflict, and nothing is written
    (the error says to keep the hub with ``hub=<current hub>``, or to use ``force``).

    Raises:
        ScaffoldNameError: a name breaks its rule, or the kind/version is scaffolded already,
            or ``namespaced`` contradicts the kind's first version, or ``hub`` is neither
            the new version nor the current hub.
        ProjectFileError: no project here.
        ScaffoldConflict: a file would overwrite content setpoint did not write.

    """
    root = root.resolve()
    project = Project.load(root)
    names = ResourceNames(
        group=check_group(group),
        domain=project.domain,
        version=check_version(version),
        kind=check_kind(kind),
    )
    for existing in project.resources:
        if existing.names == names:
            raise ScaffoldNameError(
                f"{names.kind} {names.api_version} is scaffolded already "
                f"({PROJECT_FILE} lists it); pick another --version to add a version"
            )
        if existing.names.kind == names.kind and existing.names.group != names.group:
            raise ScaffoldNameError(
                f"--kind {kind}: the project has {kind} in group {existing.names.full_group} "
                "already; a kind name is used once per project (modules are named after it)"
            )
    current = project.hub_of(names.kind, names.group)
    if current is None:
        if hub is not None and hub != names.version:
            raise ScaffoldNameError(
                f"--hub {hub}: {names.kind} has no version yet, so its first version "
                f"{names.version} is its hub; drop --hub"
            )
        resource = ScaffoldedResource(
            names=names, namespaced=True if namespaced is None else namespaced
        )
        steps = [
            f"edit {project.package}/api/{names.group_module}/{names.version}/{names.module}.py "
            f"(the {names.kind} fields) and {project.package}/controllers/{names.module}.py "
            "(what a reconcile does)",
            "make test",
        ]
        project = replace(project, resources=[*project.resources, resource])
        outputs = api_files(project, resource)
        outputs.update(wiring_files(project))
        return _finish(root, project, outputs, force=force, next_steps=steps)
    if namespaced is not None and namespaced != current.namespaced:
        scope = "namespaced" if current.namespaced else "cluster-scoped"
        raise ScaffoldNameError(
            f"{names.kind} is {scope} (its hub {current.names.version} says so); every "
            "version of a kind has the kind's scope: drop --namespaced/--cluster"
        )
    chosen = hub if hub is not None else default_hub(current.names.version, names.version)
    if chosen not in (names.version, current.names.version):
        raise ScaffoldNameError(
            f"--hub {chosen}: the hub of {names.kind} is {current.names.version}; it can stay "
            f"there (--hub {current.names.version}) or move to the new version "
            f"(--hub {names.version}), not to another version"
        )
    if chosen == current.names.version:
        return _add_spoke(root, project, current, names, force=force)
    return _move_hub(root, project, current, names, force=force)


def default_hub(current: str, new: str) -> str:
    """The hub ``setpoint create api`` picks when ``new`` joins a kind whose hub is ``current``.

    The newer of the two, in Kubernetes' version order (``v2`` > ``v1`` > ``v1beta1`` >
    ``v1alpha1``).
    ``v1`` added to ``v1alpha1`` becomes the hub (as in the tenants example and the
    evolution guide, where the current API is the hub and older shapes are spokes);
    ``v1beta1`` added to ``v1`` is a spoke of it.
    """
    return min(current, new, key=version_priority)


def _conversion_step(project: Project, spoke: ScaffoldedResource) -> str:
    names = spoke.names
    return (
        f"write {names.kind}{names.version[0].upper()}{names.version[1:]}.to_hub "
        f"and from_hub in {project.package}/api/{names.group_module}/{names.version}/"
        f"{names.module}.py (tests/test_{names.module}_{names.version}_conversion.py fails "
        "until then)"
    )


def _add_spoke(
    root: Path, project: Project, hub: ScaffoldedResource, names: ResourceNames, *, force: bool
) -> ScaffoldResult:
    """The new version is a spoke of the current hub: only its own files are written."""
    resource = ScaffoldedResource(
        names=names,
        namespaced=hub.namespaced,
        controller=False,
        spoke_of=hub.names.version,
    )
    steps = [_conversion_step(project, resource)]
    if not hub.webhooks.conversion:
        steps.append(
            f"setpoint create webhook --kind {names.kind} --conversion   # serve the conversion"
        )
    project = replace(project, resources=[*project.resources, resource])
    outputs = api_files(project, resource)
    outputs.update(wiring_files(project))
    return _finish(root, project, outputs, force=force, next_steps=steps)


def _move_hub(
    root: Path, project: Project, old: ScaffoldedResource, names: ResourceNames, *, force: bool
) -> ScaffoldResult:
    """The new version becomes the hub; the old hub and its spokes become spokes of it.

    The new hub takes over what the old one had: the controller (its module and tests keep
    their paths and now import the new version) and the webhooks recorded on the hub. The
    old hub's module is rewritten as a spoke with converter stubs, and every spoke's module
    and conversion test are rewritten to name the new hub.
    """
    new_hub = ScaffoldedResource(
        names=names,
        namespaced=old.namespaced,
        controller=old.controller,
        webhooks=old.webhooks,
    )
    old_spokes = project.spokes_of(old)
    demoted = replace(old, controller=False, spoke_of=names.version, webhooks=Webhooks())
    moved = {id(s): replace(s, spoke_of=names.version) for s in old_spokes}
    resources = [demoted if r is old else moved.get(id(r), r) for r in project.resources]
    project = replace(project, resources=[*resources, new_hub])
    spokes = [demoted, *(moved[id(s)] for s in old_spokes)]
    outputs = api_files(project, new_hub)
    for spoke in spokes:
        outputs.update(api_files(project, spoke))
    if new_hub.webhooks.admission:
        outputs.update(admission_files(project, new_hub))
    outputs.update(wiring_files(project))
    steps = [
        f"move the {names.kind} fields you need into {project.package}/api/"
        f"{names.group_module}/{names.version}/{names.module}.py (the hub, stored from now on)",
        *(_conversion_step(project, spoke) for spoke in spokes),
    ]
    if not new_hub.webhooks.conversion:
        steps.append(
            f"setpoint create webhook --kind {names.kind} --conversion   # serve the conversion"
        )
    try:
        return _finish(root, project, outputs, force=force, next_steps=steps)
    except ScaffoldConflict as exc:
        raise ScaffoldConflict(
            f"making {names.version} the hub of {names.kind} rewrites {old.names.version} "
            "(the hub until now) as a spoke of it and moves the controller and its tests to "
            f"{names.version}. To keep {old.names.version} the hub instead and add "
            f"{names.version} as a spoke of it, which rewrites nothing, pass "
            f"--hub {old.names.version}. {exc}"
        ) from None


def create_webhook(
    root: Path,
    *,
    kind: str,
    conversion: bool = False,
    defaulting: bool = False,
    validation: bool = False,
    force: bool = False,
) -> ScaffoldResult:
    """Add webhooks for ``kind``: conversion between its versions, defaulting, validation.

    Raises:
        ScaffoldNameError: no webhook asked for, no such kind, or ``conversion`` for a
            kind with a single version.
        ProjectFileError: no project here.
        ScaffoldConflict: a file would overwrite content setpoint did not write.

    """
    root = root.resolve()
    if not (conversion or defaulting or validation):
        raise ScaffoldNameError(
            "setpoint create webhook needs at least one of --conversion, --defaulting, --validation"
        )
    project = Project.load(root)
    check_kind(kind)
    hub = project.hub_of(kind)
    if hub is None:
        known = sorted({r.names.kind for r in project.resources}) or ["none yet"]
        raise ScaffoldNameError(
            f"--kind {kind}: no such kind in this project (kinds: {', '.join(known)}); "
            f"add it first with `setpoint create api --group <group> --version v1 --kind {kind}`"
        )
    if conversion and not project.spokes_of(hub):
        raise ScaffoldNameError(
            f"--conversion: {kind} has one version ({hub.names.version}), nothing to convert; "
            f"add one first with `setpoint create api --group {hub.names.group} "
            f"--version v2 --kind {kind}`"
        )
    hooks = Webhooks(
        conversion=hub.webhooks.conversion or conversion,
        defaulting=hub.webhooks.defaulting or defaulting,
        validation=hub.webhooks.validation or validation,
    )
    updated = replace(hub, webhooks=hooks)
    project = replace(project, resources=[updated if r is hub else r for r in project.resources])
    outputs = wiring_files(project)
    if hooks.admission:
        outputs.update(admission_files(project, updated))
    steps = ["make test    # the webhook tests run against the local control plane"]
    if hooks.admission:
        steps.insert(0, f"edit {project.package}/webhooks/{hub.names.module}.py (your rules)")
    return _finish(root, project, outputs, force=force, next_steps=steps)
