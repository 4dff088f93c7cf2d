"""Names a scaffolded project is made of, checked before anything is written.

Every check returns the value or raises :class:`ScaffoldNameError` naming the option, the
value, the rule and an example, so ``setpoint init --domain Example.COM`` fails with one
line and an empty directory stays empty.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from setpoint.api.declaration import default_plural
from setpoint.api.errors import SetpointError
from setpoint.api.validation import is_dns1123_label, is_dns1123_subdomain

__all__ = [
    "ResourceNames",
    "ScaffoldNameError",
    "check_domain",
    "check_group",
    "check_kind",
    "check_package",
    "check_project_name",
    "check_version",
    "package_for",
    "snake_case",
]

_VERSION = re.compile(r"v[1-9][0-9]*(?:(?:alpha|beta)[1-9][0-9]*)?")
_KIND = re.compile(r"[A-Z][A-Za-z0-9]*")
_PACKAGE = re.compile(r"[a-z_][a-z0-9_]*")
# Names a generated module or package must not shadow (the standard library's and ours).
_RESERVED_PACKAGES = frozenset({"setpoint", "test", "tests", "api", "typing", "asyncio", "config"})


class ScaffoldNameError(SetpointError, ValueError):
    """A name given to ``setpoint init`` or ``setpoint create`` breaks a rule.

    The message names the option, the value, the rule and an example that passes.
    """


def check_domain(value: str) -> str:
    """The project's domain (``--domain``): a lower-case DNS subdomain with a dot."""
    if not is_dns1123_subdomain(value) or "." not in value:
        raise ScaffoldNameError(
            f"--domain {value!r} is not a domain: use a lower-case DNS name with at least one "
            "dot, such as example.com (API groups are <group>.<domain>)"
        )
    return value


def check_project_name(value: str) -> str:
    """The project's name (``--name``): a DNS label, used for the Deployment and labels."""
    if not is_dns1123_label(value):
        raise ScaffoldNameError(
            f"--name {value!r} is not a project name: use lower-case letters, digits and '-', "
            "starting with a letter, at most 63 characters (such as memcached-operator)"
        )
    if not value[0].isalpha():
        raise ScaffoldNameError(f"--name {value!r} must start with a letter (Python imports it)")
    return value


def package_for(project_name: str) -> str:
    """The Python package of a project: its name with '-' as '_' (``memcached_operator``)."""
    return project_name.replace("-", "_")


def check_package(value: str) -> str:
    """The operator's Python package: an importable, non-reserved lower-case identifier."""
    if not _PACKAGE.fullmatch(value) or keyword.iskeyword(value) or value in _RESERVED_PACKAGES:
        raise ScaffoldNameError(
            f"package {value!r} cannot be the operator's Python package: use lower-case letters, "
            f"digits and '_', not a keyword nor one of {sorted(_RESERVED_PACKAGES)} "
            "(pass --name to choose another)"
        )
    return value


def check_group(value: str) -> str:
    """An API group's first label (``--group``); the full group is ``<group>.<domain>``."""
    if not is_dns1123_label(value) or not value[0].isalpha():
        raise ScaffoldNameError(
            f"--group {value!r} is not a group name: use one lower-case DNS label starting with "
            "a letter, such as 'batch' or 'cache' (the domain is appended: batch.example.com)"
        )
    return value


def check_version(value: str) -> str:
    """An API version (``--version``): ``v1``, ``v2beta1``, ``v1alpha2`` ..."""
    if not _VERSION.fullmatch(value):
        raise ScaffoldNameError(
            f"--version {value!r} is not a Kubernetes API version: use v<N>, v<N>beta<M> or "
            "v<N>alpha<M>, such as v1 or v1alpha1"
        )
    return value


def check_kind(value: str) -> str:
    """A kind (``--kind``): UpperCamelCase letters and digits, at most 63 characters."""
    if not _KIND.fullmatch(value) or len(value) > 63:
        raise ScaffoldNameError(
            f"--kind {value!r} is not a kind: use UpperCamelCase letters and digits, starting "
            "with a capital letter, at most 63 characters (such as CronJob)"
        )
    if keyword.iskeyword(snake_case(value)):
        raise ScaffoldNameError(f"--kind {value!r} would make a module named after a keyword")
    return value


def snake_case(kind: str) -> str:
    """``CronJob`` -> ``cron_job``: the module name of a kind."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", kind).lower()


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Every name derived from one ``--group/--version/--kind`` in a project."""

    group: str
    """The group's first label, as given (``cache``)."""
    domain: str
    """The project's domain (``example.com``)."""
    version: str
    """The API version (``v1``)."""
    kind: str
    """The kind (``Memcached``)."""

    @property
    def full_group(self) -> str:
        """``<group>.<domain>``: the API group the CRD serves."""
        return f"{self.group}.{self.domain}"

    @property
    def group_module(self) -> str:
        """The group as a Python module name (``-`` as ``_``)."""
        return self.group.replace("-", "_")

    @property
    def module(self) -> str:
        """The kind's module name (``memcached``, ``cron_job``)."""
        return snake_case(self.kind)

    @property
    def plural(self) -> str:
        """The resource name, derived as kubebuilder and setpoint's generator derive it."""
        return default_plural(self.kind.lower())

    @property
    def crd_name(self) -> str:
        """``<plural>.<full group>``: the CRD's name."""
        return f"{self.plural}.{self.full_group}"

    @property
    def api_version(self) -> str:
        """``<full group>/<version>``."""
        return f"{self.full_group}/{self.version}"
