"""Admission webhooks declared next to the type: validators and defaulters.

A *validator* decides whether the API server may store an object; a *defaulter* fills in
what the user left out before it is stored. Each is a class next to the resource it guards,
in the spirit of controller-runtime's ``CustomValidator`` and ``CustomDefaulter``::

    class TenantValidator(sp.CustomValidator[Tenant]):
        \"\"\"Refuses a Tenant that claims a namespace reserved for the cluster.\"\"\"

        def validate_create(self, obj: Tenant) -> sp.Warnings:
            reserved = [n for n in obj.spec.namespaces if n.startswith("kube-")]
            if reserved:
                raise sp.Denied(f"spec.namespaces: {reserved[0]!r} is reserved")
            return ["spec.isolated is false: pods are reachable"] if not obj.spec.isolated else None

        def validate_update(self, old: Tenant, new: Tenant) -> sp.Warnings:
            return self.validate_create(new)

    class TenantDefaulter(sp.CustomDefaulter[Tenant]):
        \"\"\"Gives a Tenant without an admin group the group named after it.\"\"\"

        def default(self, obj: Tenant) -> None:
            obj.spec.admin_group = obj.spec.admin_group or f"{obj.metadata.name}-admins"

What each piece means:

- A validator defines any of ``validate_create(obj)``, ``validate_update(old, new)`` and
  ``validate_delete(obj)``; the operations it is registered for are the ones it defines.
  Each returns warnings (a list of strings, or ``None``) that the API server passes on to
  the client (kubectl prints them), and refuses the request by raising :class:`Denied` (or
  ``ValueError``) with the message the user should read. Methods may be ``async``.
- A defaulter defines ``default(obj)`` and changes ``obj`` in place; the webhook answers
  with the JSON patch from what was sent to what ``default`` left.
- ``webhook_options`` (an :class:`AdmissionOptions`) holds the failure policy, timeout,
  selectors and, if the defaults do not suit, the path and the webhook's name.

``setpoint generate webhook`` writes the ValidatingWebhookConfiguration and
MutatingWebhookConfiguration from these classes (:mod:`setpoint.crd.webhooks`), and
:mod:`setpoint.webhook.admission_review` serves them. This module is pure data: it declares and
checks, it serves nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

from setpoint.api.declaration import DeclarationError
from setpoint.api.errors import SetpointError
from setpoint.api.resource import Resource
from setpoint.api.validation import is_dns1123_subdomain

__all__ = [
    "AdmissionOptions",
    "AdmissionWebhookSpec",
    "CustomDefaulter",
    "CustomValidator",
    "Denied",
    "Operation",
    "Warnings",
    "admission_spec_of",
    "is_admission_webhook",
]

R = TypeVar("R", bound=Resource)

Operation = Literal["CREATE", "UPDATE", "DELETE"]
"""An admission operation a webhook is called for."""

Warnings = Sequence[str] | None
"""What a validator returns: warnings for the client (kubectl prints each), or ``None``."""

_OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE")
_VALIDATE_METHODS: Final = {
    "CREATE": "validate_create",
    "UPDATE": "validate_update",
    "DELETE": "validate_delete",
}
_PATH: Final = re.compile(r"^/[A-Za-z0-9._~/-]*$")


class Denied(SetpointError):
    """Raise from a validator or defaulter to refuse the request.

    Args:
        message: What the user reads after ``admission webhook "..." denied the request:``;
            name the field and what to do (``spec.namespaces: 'kube-system' is reserved``).
        warnings: Warnings to show with the denial.
        code: The HTTP status code reported to the client (403, or 422 for invalid input).

    """

    __module__ = "setpoint"

    def __init__(self, message: str, *, warnings: Sequence[str] = (), code: int = 403) -> None:
        super().__init__(message)
        self.message = message
        """The reason given to the user."""
        self.warnings = tuple(warnings)
        """Warnings sent with the denial."""
        if not 400 <= code <= 599:
            raise ValueError(f"Denied(code={code}) must be an HTTP error code (400-599)")
        self.code = code
        """The HTTP status code in the response's ``status``."""


@dataclass(frozen=True, kw_only=True)
class AdmissionOptions:
    """How the API server calls one admission webhook; every default is documented here."""

    path: str | None = None
    """The path served. ``None``: kubebuilder's, ``/validate-<group>-<version>-<kind>`` or
    ``/mutate-...`` with the group's dots as dashes
    (``/validate-tenants-setpoint-dev-v1-tenant``)."""

    name: str | None = None
    """The webhook's name in its configuration (a DNS name of at least three labels).
    ``None``: ``v<kind>-<version>.<group>`` (``m...`` for a defaulter)."""

    operations: tuple[Operation, ...] | None = None
    """The operations to be called for. ``None``: a validator's are those it defines a method
    for; a defaulter's are CREATE and UPDATE."""

    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    """What the API server does when the webhook cannot be reached or times out: ``Fail``
    (refuse the request; the safe choice for validation) or ``Ignore`` (let it through)."""

    side_effects: Literal["None", "NoneOnDryRun"] = "None"
    """Whether calling the webhook changes anything besides the answer. Validators and
    defaulters have none; ``NoneOnDryRun`` if yours skips side effects on dry runs."""

    timeout_seconds: int = 10
    """Seconds the API server waits for an answer (1-30; the API server's default is 10)."""

    match_policy: Literal["Equivalent", "Exact"] = "Equivalent"
    """``Equivalent``: also called for requests at the kind's other versions (converted to
    this class's version first). ``Exact``: only for requests at this version."""

    namespace_selector: Mapping[str, Any] | None = None
    """A label selector (``{"matchLabels": {...}}`` or ``matchExpressions``) on the object's
    namespace. ``None``: every namespace."""

    object_selector: Mapping[str, Any] | None = None
    """A label selector on the object itself. ``None``: every object."""

    reinvocation_policy: Literal["Never", "IfNeeded"] = "Never"
    """Defaulters only: ``IfNeeded`` has the API server call it again when a later mutating
    webhook changed the object."""

    def __post_init__(self) -> None:
        if self.path is not None and (not _PATH.match(self.path) or "//" in self.path):
            raise ValueError(
                f"AdmissionOptions.path={self.path!r} must start with '/' and hold only "
                "letters, digits and . _ ~ - /"
            )
        if self.name is not None and (
            not is_dns1123_subdomain(self.name) or self.name.count(".") < 2
        ):
            raise ValueError(
                f"AdmissionOptions.name={self.name!r} must be a lower-case DNS name of at least "
                "three labels, such as 'vtenant-v1.tenants.example.com'"
            )
        if self.operations is not None:
            bad = [op for op in self.operations if op not in _OPERATIONS]
            if bad or not self.operations:
                raise ValueError(
                    f"AdmissionOptions.operations={self.operations!r} must list one or more of "
                    f"{', '.join(_OPERATIONS)}"
                )
        if not 1 <= self.timeout_seconds <= 30:
            raise ValueError(
                f"AdmissionOptions.timeout_seconds={self.timeout_seconds} must be 1 to 30 (the "
                "API server's limits)"
            )


@dataclass(frozen=True, slots=True)
class AdmissionWebhookSpec:
    """One declared admission webhook, with every default resolved."""

    cls: type[Any]
    """The validator or defaulter class."""
    resource: type[Resource]
    """The resource class it guards."""
    mutating: bool
    """A defaulter (mutating webhook) rather than a validator."""
    path: str
    """The path it is served on."""
    name: str
    """Its name in the webhook configuration."""
    operations: tuple[Operation, ...]
    """The operations the API server calls it for."""
    options: AdmissionOptions = field(repr=False)
    """The declared options."""

    @property
    def kind_label(self) -> str:
        """``Tenant tenants.setpoint.dev/v1``, for messages."""
        gvk = self.resource.declaration().gvk
        return f"{gvk.kind} {gvk.api_version}"


class _AdmissionBase(Generic[R]):
    """What validators and defaulters share: the resource they guard and their options."""

    webhook_options: ClassVar[AdmissionOptions] = AdmissionOptions()
    """How the API server calls this webhook; see :class:`AdmissionOptions`."""

    __setpoint_admission__: ClassVar[AdmissionWebhookSpec]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__ and cls.__name__ in ("CustomValidator", "CustomDefaulter"):
            return
        where = f"{cls.__module__}.{_short(cls)}"
        roles = [b for b in (CustomValidator, CustomDefaulter) if issubclass(cls, b)]
        if len(roles) > 1:
            raise DeclarationError(
                f"{where} derives from both sp.CustomValidator and sp.CustomDefaulter; declare "
                "two classes, so each webhook has its own path, name and failure policy"
            )
        base = roles[0]
        resource = _type_argument(cls, base)
        if resource is None:
            raise DeclarationError(
                f"{where} derives from sp.{base.__name__} without naming the resource; write "
                f"sp.{base.__name__}[MyResource]"
            )
        if not (isinstance(resource, type) and issubclass(resource, Resource)):
            raise DeclarationError(
                f"{where} names {resource!r}, which is not a Resource class; name the "
                "@sp.resource class it guards"
            )
        options = cls.webhook_options
        if not isinstance(options, AdmissionOptions):
            raise DeclarationError(
                f"{where}.webhook_options must be an sp.AdmissionOptions(...), not "
                f"{type(options).__name__}"
            )
        cls.__setpoint_admission__ = _spec(cls, resource, options, where, base is CustomDefaulter)


class CustomValidator(_AdmissionBase[R]):
    """A validating admission webhook for the resource class ``R``; see the module docstring.

    Define any of the three methods; the webhook is registered for the operations whose
    method is defined. Return warnings (or ``None``); raise :class:`Denied` or
    ``ValueError`` to refuse, with the message the user should read. Any other exception is
    a bug: the request is refused with code 500, and the webhook counts it
    (``controller_runtime_webhook_panics_total``) and logs the traceback.

    Raises (when the class is defined):
        DeclarationError: ``R`` is not a Resource class, no method is defined, or
            ``webhook_options.operations`` lists one without its method.

    """

    def validate_create(self, obj: R) -> Warnings | Awaitable[Warnings]:
        """Check a new object. Return warnings; raise :class:`Denied` to refuse it."""
        return None

    def validate_update(self, old: R, new: R) -> Warnings | Awaitable[Warnings]:
        """Check a change from ``old`` (as stored) to ``new``. Raise :class:`Denied` to refuse."""
        return None

    def validate_delete(self, obj: R) -> Warnings | Awaitable[Warnings]:
        """Check a deletion of ``obj`` (as stored). Raise :class:`Denied` to refuse it."""
        return None


class CustomDefaulter(_AdmissionBase[R]):
    """A mutating admission webhook that sets defaults on the resource class ``R``.

    Define :meth:`default`; change ``obj`` in place. The answer is the JSON patch from the
    object as sent to the object as ``default`` left it, touching only what ``default``
    changed. Raise :class:`Denied` to refuse the request instead.

    Raises (when the class is defined):
        DeclarationError: ``R`` is not a Resource class, ``default`` is not defined, or
            ``webhook_options.operations`` includes DELETE.

    """

    def default(self, obj: R) -> Awaitable[None] | None:
        """Fill in defaults on ``obj``, in place."""
        raise NotImplementedError


def _spec(
    cls: type[Any],
    resource: type[Resource],
    options: AdmissionOptions,
    where: str,
    mutating: bool,
) -> AdmissionWebhookSpec:
    gvk = resource.declaration().gvk
    defined = {
        name
        for klass in cls.__mro__
        if klass not in (CustomValidator, CustomDefaulter, _AdmissionBase)
        for name in klass.__dict__
    }
    if mutating:
        if "default" not in defined:
            raise DeclarationError(
                f"{where} derives from sp.CustomDefaulter[{_short(resource)}] but does not "
                f"define default(self, obj: {_short(resource)}) -> None"
            )
        operations: tuple[Operation, ...] = options.operations or ("CREATE", "UPDATE")
        if "DELETE" in operations:
            raise DeclarationError(
                f"{where}.webhook_options.operations includes DELETE: a deleted object gets no "
                "defaults; use CREATE and UPDATE"
            )
    else:
        own = tuple(op for op in _OPERATIONS if _VALIDATE_METHODS[op] in defined)
        if not own:
            raise DeclarationError(
                f"{where} derives from sp.CustomValidator[{_short(resource)}] but defines none of "
                "validate_create, validate_update, validate_delete"
            )
        operations = options.operations or own  # type: ignore[assignment]
        missing = [op for op in operations if op not in own]
        if missing:
            raise DeclarationError(
                f"{where}.webhook_options.operations lists {', '.join(missing)} but the class "
                f"defines no {', '.join(_VALIDATE_METHODS[op] for op in missing)}"
            )
    kind = gvk.kind.lower()
    prefix = "mutate" if mutating else "validate"
    path = options.path or f"/{prefix}-{gvk.group.replace('.', '-')}-{gvk.version}-{kind}"
    name = options.name or f"{prefix[0]}{kind}-{gvk.version}.{gvk.group}"
    if options.name is None and (not is_dns1123_subdomain(name) or name.count(".") < 2):
        raise DeclarationError(
            f"{where}: the default webhook name {name!r} is not a DNS name of three labels; "
            "set webhook_options = sp.AdmissionOptions(name='v...example.com')"
        )
    return AdmissionWebhookSpec(
        cls=cls,
        resource=resource,
        mutating=mutating,
        path=path,
        name=name,
        operations=tuple(operations),
        options=options,
    )


def _type_argument(cls: type, origin: type) -> Any:
    """The ``X`` of the nearest ``origin[X]`` base of ``cls``, else ``None``."""
    for klass in cls.__mro__:
        for base in klass.__dict__.get("__orig_bases__", ()):
            if getattr(base, "__origin__", None) is origin:
                args: tuple[Any, ...] = getattr(base, "__args__", ())
                if len(args) == 1 and not isinstance(args[0], TypeVar):
                    return args[0]
    return None


def _short(cls: type) -> str:
    return cls.__qualname__.rsplit("<locals>.", 1)[-1]


def is_admission_webhook(obj: object) -> bool:
    """Whether ``obj`` is a declared validator or defaulter class (not the bases)."""
    return isinstance(obj, type) and "__setpoint_admission__" in obj.__dict__


def admission_spec_of(obj: object) -> AdmissionWebhookSpec:
    """The resolved declaration of a validator or defaulter class or instance.

    Raises:
        TypeError: ``obj`` is not a declared validator or defaulter.

    """
    cls = obj if isinstance(obj, type) else type(obj)
    spec = cls.__dict__.get("__setpoint_admission__")
    if spec is None:
        raise TypeError(
            f"{obj!r} is not an admission webhook: derive a class from "
            "sp.CustomValidator[MyResource] or sp.CustomDefaulter[MyResource]"
        )
    return spec  # type: ignore[no-any-return]
