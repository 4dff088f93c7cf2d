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

from setpoint.cli.scaffold.files import FilePlan, apply, plan_files
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
    force: bool = False,
) -> ScaffoldResult:
    """Add a kind, or another version of a kind, to the project in ``root``.

    The first version of a kind gets its types, a controller wired into the manager, a
    FakeClient unit test, an integration test and a sample. A later version becomes a
    spoke of the first (the hub): its types with converter stubs that raise
    ``NotImplementedError`` until written, and a conversion test that fails until then.

    Raises:
        ScaffoldNameError: a name breaks its rule, or the kind/version is scaffolded already,
            or ``namespaced`` contradicts the kind's first version.
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
    hub = project.hub_of(names.kind, names.group)
    if hub is None:
        resource = ScaffoldedResource(
            names=names, namespaced=True if namespaced is None else namespaced
        )
        steps = [
            f"edit {project.package}/api/{names.group_module}/{names.version}/{names.module}.py "
            f"(the {names.kind} fields) and {project.package}/controllers/{names.module}.py "
            "(what a reconcile does)",
            "make test",
        ]
    else:
        if namespaced is not None and namespaced != hub.namespaced:
            scope = "namespaced" if hub.namespaced else "cluster-scoped"
            raise ScaffoldNameError(
                f"{names.kind} is {scope} (its first version {hub.names.version} says so); every "
                "version of a kind has the kind's scope: drop --namespaced/--cluster"
            )
        resource = ScaffoldedResource(
            names=names,
            namespaced=hub.namespaced,
            controller=False,
            spoke_of=hub.names.version,
        )
        steps = [
            f"write {resource.names.kind}{names.version[0].upper()}{names.version[1:]}.to_hub "
            f"and from_hub in {project.package}/api/{names.group_module}/{names.version}/"
            f"{names.module}.py (tests/test_{names.module}_{names.version}_conversion.py fails "
            "until then)",
            f"setpoint create webhook --kind {names.kind} --conversion   # serve the conversion",
        ]
    project = replace(project, resources=[*project.resources, resource])
    outputs = api_files(project, resource)
    outputs.update(wiring_files(project))
    return _finish(root, project, outputs, force=force, next_steps=steps)


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
