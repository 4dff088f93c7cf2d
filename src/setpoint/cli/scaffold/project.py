"""The project file, ``PROJECT``: what ``setpoint init`` and ``setpoint create`` scaffolded.

kubebuilder's ``PROJECT`` file plays the same part. Every command reads it to learn the
layout (domain, package, kinds and their versions, webhooks) and writes it back with what
it added, together with the SHA-256 of every file it wrote. A later command compares a
file on disk with that digest: equal means nobody edited it since, so it may be
regenerated; different means a person changed it, so the command refuses (and shows the
diff) unless ``--force`` is given.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from setpoint.api.errors import SetpointError
from setpoint.cli.scaffold.names import (
    ResourceNames,
    check_domain,
    check_group,
    check_kind,
    check_package,
    check_project_name,
    check_version,
)

__all__ = [
    "LAYOUT",
    "PROJECT_FILE",
    "Project",
    "ProjectFileError",
    "ScaffoldedResource",
    "Webhooks",
    "digest",
]

PROJECT_FILE = "PROJECT"
"""The project file's name, at the project's root."""

LAYOUT = "setpoint.dev/v1"
"""The layout this version of setpoint scaffolds (recorded, so a later layout can migrate)."""

_HEADER = (
    "# Written by setpoint: what `setpoint init` and `setpoint create` scaffolded here.\n"
    "# Later commands read it to know the layout; `files` holds the SHA-256 of each file as\n"
    "# setpoint wrote it, so a file you changed is never overwritten without --force.\n"
)


class ProjectFileError(SetpointError, ValueError):
    """``PROJECT`` is missing, unreadable or not one setpoint wrote; the message says which."""


def digest(content: bytes) -> str:
    """The SHA-256 (hex) recorded for a file's content."""
    return hashlib.sha256(content).hexdigest()


@dataclass(slots=True)
class Webhooks:
    """The webhooks scaffolded for a kind."""

    conversion: bool = False
    """The kind's versions are converted by the operator (``/convert``)."""
    defaulting: bool = False
    """A ``CustomDefaulter`` (mutating admission webhook)."""
    validation: bool = False
    """A ``CustomValidator`` (validating admission webhook)."""

    @property
    def admission(self) -> bool:
        """Whether any admission webhook (defaulting or validation) is scaffolded."""
        return self.defaulting or self.validation


@dataclass(slots=True)
class ScaffoldedResource:
    """One version of one kind, as ``setpoint create api`` recorded it."""

    names: ResourceNames
    """Group, domain, version and kind."""
    namespaced: bool = True
    """Namespaced (``--namespaced``) or cluster-scoped (``--cluster``)."""
    controller: bool = True
    """A controller reconciles this version (the kind's hub; never a spoke)."""
    spoke_of: str | None = None
    """For a spoke: the hub version it converts to and from (``None``: this is the hub)."""
    webhooks: Webhooks = field(default_factory=Webhooks)
    """Webhooks scaffolded for the kind (recorded on the hub version)."""

    @property
    def is_hub(self) -> bool:
        """Whether this is the kind's hub (and storage version); ``create api --hub`` chooses it."""
        return self.spoke_of is None

    def to_yaml(self) -> dict[str, Any]:
        """The entry under ``resources`` in ``PROJECT``."""
        entry: dict[str, Any] = {
            "group": self.names.group,
            "domain": self.names.domain,
            "version": self.names.version,
            "kind": self.names.kind,
            "plural": self.names.plural,
            "namespaced": self.namespaced,
            "controller": self.controller,
        }
        if self.spoke_of is not None:
            entry["spokeOf"] = self.spoke_of
        if self.is_hub:
            entry["webhooks"] = {
                "conversion": self.webhooks.conversion,
                "defaulting": self.webhooks.defaulting,
                "validation": self.webhooks.validation,
            }
        return entry

    @classmethod
    def from_yaml(cls, entry: Any, where: str) -> ScaffoldedResource:
        """Read one ``resources`` entry; ``where`` names it in errors."""
        if not isinstance(entry, dict):
            raise ProjectFileError(f"{where} must be a mapping, not {type(entry).__name__}")
        try:
            names = ResourceNames(
                group=check_group(str(entry["group"])),
                domain=check_domain(str(entry["domain"])),
                version=check_version(str(entry["version"])),
                kind=check_kind(str(entry["kind"])),
            )
        except KeyError as exc:
            raise ProjectFileError(f"{where} has no {exc.args[0]!r}") from None
        except ValueError as exc:
            raise ProjectFileError(f"{where}: {exc}") from None
        hooks = entry.get("webhooks") or {}
        spoke_of = entry.get("spokeOf")
        return cls(
            names=names,
            namespaced=bool(entry.get("namespaced", True)),
            controller=bool(entry.get("controller", spoke_of is None)),
            spoke_of=str(spoke_of) if spoke_of is not None else None,
            webhooks=Webhooks(
                conversion=bool(hooks.get("conversion", False)),
                defaulting=bool(hooks.get("defaulting", False)),
                validation=bool(hooks.get("validation", False)),
            ),
        )


@dataclass(slots=True)
class Project:
    """The content of ``PROJECT``: the project's names, its kinds and the files written."""

    name: str
    """The project's name (a DNS label)."""
    domain: str
    """The domain appended to every group."""
    package: str
    """The operator's Python package."""
    setpoint_version: str
    """The setpoint version that scaffolded the project."""
    setpoint_install: str
    """What ``pip install`` is given to install setpoint (the Makefile's ``SETPOINT``)."""
    resources: list[ScaffoldedResource] = field(default_factory=list)
    """Every kind and version, in the order they were created."""
    files: dict[str, str] = field(default_factory=dict)
    """Relative path -> SHA-256 of the content setpoint last wrote there."""

    def kinds(self) -> dict[tuple[str, str], list[ScaffoldedResource]]:
        """``(full group, kind)`` -> its versions, hub first."""
        out: dict[tuple[str, str], list[ScaffoldedResource]] = {}
        for resource in self.resources:
            key = (resource.names.full_group, resource.names.kind)
            out.setdefault(key, []).append(resource)
        for versions in out.values():
            versions.sort(key=lambda r: not r.is_hub)
        return out

    def hub_of(self, kind: str, group: str | None = None) -> ScaffoldedResource | None:
        """The hub version of ``kind`` (in ``group`` when given), if scaffolded."""
        for resource in self.resources:
            if resource.names.kind != kind or not resource.is_hub:
                continue
            if group is None or resource.names.group == group:
                return resource
        return None

    def spokes_of(self, hub: ScaffoldedResource) -> list[ScaffoldedResource]:
        """The other versions of ``hub``'s kind: the spokes that convert through it."""
        return [
            r
            for r in self.resources
            if r.spoke_of is not None
            and r.names.kind == hub.names.kind
            and r.names.full_group == hub.names.full_group
        ]

    def dump(self) -> str:
        """The file's text (deterministic: the same project gives the same bytes)."""
        document = {
            "layout": LAYOUT,
            "projectName": self.name,
            "domain": self.domain,
            "package": self.package,
            "setpoint": {"version": self.setpoint_version, "install": self.setpoint_install},
            "resources": [r.to_yaml() for r in self.resources],
            "files": dict(sorted(self.files.items())),
        }
        return _HEADER + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)

    @classmethod
    def load(cls, root: Path) -> Project:
        """Read ``<root>/PROJECT``.

        Raises:
            ProjectFileError: no such file (run ``setpoint init`` first), or its content is
                not a project setpoint wrote (the message names the field).

        """
        path = root / PROJECT_FILE
        if not path.is_file():
            raise ProjectFileError(
                f"{path} does not exist: run `setpoint init` first (or run this command in the "
                "project's root directory)"
            )
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ProjectFileError(f"{path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ProjectFileError(f"{path} must be a YAML mapping")
        if data.get("layout") != LAYOUT:
            raise ProjectFileError(
                f"{path}: layout {data.get('layout')!r} is not {LAYOUT!r}, the layout this "
                "setpoint scaffolds"
            )
        try:
            name = check_project_name(str(data["projectName"]))
            domain = check_domain(str(data["domain"]))
            package = check_package(str(data["package"]))
            tool = data.get("setpoint") or {}
            resources = [
                ScaffoldedResource.from_yaml(entry, f"{path}: resources[{i}]")
                for i, entry in enumerate(data.get("resources") or [])
            ]
        except KeyError as exc:
            raise ProjectFileError(f"{path} has no {exc.args[0]!r}") from None
        except ProjectFileError:
            raise
        except ValueError as exc:
            raise ProjectFileError(f"{path}: {exc}") from None
        files = data.get("files") or {}
        if not isinstance(files, dict):
            raise ProjectFileError(f"{path}: files must be a mapping of path to SHA-256")
        return cls(
            name=name,
            domain=domain,
            package=package,
            setpoint_version=str(tool.get("version", "")),
            setpoint_install=str(tool.get("install", "setpoint[testing]")),
            resources=resources,
            files={str(k): str(v) for k, v in files.items()},
        )
