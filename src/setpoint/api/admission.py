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
  selectors, match conditions and, if the defaults do not suit, the path and the webhook's
  name.

Any kind, not only setpoint's own resources (what controller-runtime's ``admission.Validator[T]``
and kopf's ``@kopf.on.validate``/``@kopf.on.mutate`` offer): the type argument is any typed
class (a :class:`~setpoint.api.resource.Resource`, or any class with ``gvk``,
``from_object`` and ``to_object``), or ``dict[str, Any]`` with the kind named by the class
attribute ``kind`` (a :class:`~setpoint.api.gvk.GroupVersionKind`, such as ``sp.kinds.Pod``);
the methods then get and change the JSON objects the API server sent::

    class SidecarInjector(sp.CustomDefaulter[dict[str, Any]]):
        kind = sp.kinds.Pod

        def default(self, obj: dict[str, Any]) -> None:
            obj["spec"]["containers"].append({"name": "proxy", "image": "envoy:v1.31"})

The REST resource and scope of the generated rule come from the typed class, from
:data:`~setpoint.api.kinds.BUILTIN_RESOURCES` for a built-in kind, or from
``AdmissionOptions(resource=..., scope=...)`` for any other.

``setpoint generate webhook`` writes the ValidatingWebhookConfiguration and
MutatingWebhookConfiguration from these classes (:mod:`setpoint.crd.webhooks`), and
:mod:`setpoint.webhook.admission_review` serves them. This module is pure data: it declares and
checks, it serves nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Literal, TypeVar, cast, get_origin

from setpoint.api.declaration import DeclarationError
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import BUILTIN_RESOURCES, ResourceInfo
from setpoint.api.resource import Resource
from setpoint.api.validation import is_dns1123_subdomain, is_qualified_name

if TYPE_CHECKING:
    from setpoint.api.types import Kind, TypedObject

__all__ = [
    "AdmissionOptions",
    "AdmissionWebhookSpec",
    "CelValidation",
    "CustomDefaulter",
    "CustomValidator",
    "Denied",
    "Operation",
    "PolicyReason",
    "Scope",
    "Warnings",
    "admission_spec_of",
    "is_admission_webhook",
]

R = TypeVar("R", bound="TypedObject | dict[str, Any]")
"""The type of the objects a validator or defaulter gets: a typed class, or
``dict[str, Any]`` (JSON objects, with the kind named by the class attribute ``kind``).
mypy refuses anything else; the class definition refuses it at run time."""

Operation = Literal["CREATE", "UPDATE", "DELETE"]
"""An admission operation a webhook is called for."""

Scope = Literal["Namespaced", "Cluster", "*"]
"""The scope of a webhook rule: namespaced objects, cluster-scoped ones, or both."""

Warnings = Sequence[str] | None
"""What a validator returns: warnings for the client (kubectl prints each), or ``None``."""

_OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE")
_VALIDATE_METHODS: Final = {
    "CREATE": "validate_create",
    "UPDATE": "validate_update",
    "DELETE": "validate_delete",
}
_PATH: Final = re.compile(r"^/[A-Za-z0-9._~/-]*$")
_RESOURCE: Final = re.compile(r"^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)(/(\*|[a-z0-9]+))?$")
_MAX_MATCH_CONDITIONS: Final = 64
"""The API server's limit on ``matchConditions`` per webhook."""


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


PolicyReason = Literal["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"]
"""The reason a ValidatingAdmissionPolicy gives for a failed check (the HTTP status it maps to)."""


@dataclass(frozen=True)
class CelValidation:
    """One CEL check of a validator the API server runs itself: a ValidatingAdmissionPolicy.

    A validator whose rules are all CEL needs no webhook: declare them as
    ``validations = (sp.CelValidation("..."), ...)`` instead of ``validate_*`` methods, and
    ``setpoint generate webhook`` writes a ``ValidatingAdmissionPolicy`` and its binding
    (``webhook/policies.yaml``) in place of a webhook. The expression sees ``object``,
    ``oldObject`` (``null`` on CREATE), ``request`` and ``authorizer``, as in
    ``matchConditions``; the request is refused when it is false.
    """

    expression: str
    """The CEL expression that must hold (``object.spec.replicas <= 5``)."""
    _: KW_ONLY
    message: str | None = None
    """What the user reads when it fails (one line). Default: the API server names the
    expression."""
    message_expression: str | None = None
    """A CEL expression producing the message, evaluated on failure. Default: none."""
    reason: PolicyReason | None = None
    """The failure's reason and HTTP code. Default: the API server's, ``Invalid`` (422)."""

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise ValueError("CelValidation.expression is empty: write the CEL that must hold")
        for attr in ("message", "message_expression"):
            value = getattr(self, attr)
            if value is not None and (not value.strip() or "\n" in value or "\r" in value):
                raise ValueError(
                    f"CelValidation({self.expression!r}).{attr} must be a non-empty single "
                    "line; the API server rejects line breaks"
                )
        if self.reason is not None and self.reason not in (
            "Unauthorized",
            "Forbidden",
            "Invalid",
            "RequestEntityTooLarge",
        ):
            raise ValueError(
                f"CelValidation({self.expression!r}).reason={self.reason!r} must be one of "
                "Unauthorized, Forbidden, Invalid, RequestEntityTooLarge"
            )

    def to_policy(self) -> dict[str, Any]:
        """The ``spec.validations`` entry of a ValidatingAdmissionPolicy."""
        out: dict[str, Any] = {"expression": self.expression}
        if self.message is not None:
            out["message"] = self.message
        if self.message_expression is not None:
            out["messageExpression"] = self.message_expression
        if self.reason is not None:
            out["reason"] = self.reason
        return out


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

    match_conditions: Mapping[str, str] | None = None
    """CEL expressions the API server evaluates before calling, by name (``matchConditions``,
    in this order): the webhook is called only when all are true, so requests it would
    allow anyway cost no call. Each sees ``object``, ``oldObject``, ``request`` and
    ``authorizer``: ``{"not-a-node": "!request.userInfo.username.startsWith('system:node:')"}``.
    At most 64; names are qualified names (``[prefix/]name``). ``None``: every request the
    rules and selectors match."""

    resource: str | None = None
    """The REST resource the rule names (``"widgets"``, ``"pods"``, or a subresource
    ``"pods/ephemeralcontainers"``). ``None``: the typed class's plural, or the built-in
    kind's (:data:`~setpoint.api.kinds.BUILTIN_RESOURCES`); required for another GVK."""

    scope: Scope | None = None
    """The rule's scope: ``Namespaced``, ``Cluster`` or ``*``. ``None``: the kind's own
    (known as ``resource`` is); ``*`` when ``resource`` is given without it."""

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
        if self.match_conditions is not None:
            _check_match_conditions(self.match_conditions)
        if self.resource is not None and not _RESOURCE.match(self.resource):
            raise ValueError(
                f"AdmissionOptions.resource={self.resource!r} must be a lower-case plural "
                "resource name, optionally with a subresource ('pods', 'deployments/scale')"
            )
        if self.scope is not None and self.scope not in ("Namespaced", "Cluster", "*"):
            raise ValueError(
                f"AdmissionOptions.scope={self.scope!r} must be 'Namespaced', 'Cluster' or '*'"
            )


def _check_match_conditions(conditions: Mapping[str, str]) -> None:
    """Refuse what the API server refuses in ``matchConditions`` (names, count, empty CEL)."""
    if not isinstance(conditions, Mapping):
        raise ValueError(
            "AdmissionOptions.match_conditions must map each condition's name to its CEL "
            f"expression, not {type(conditions).__name__}"
        )
    if len(conditions) > _MAX_MATCH_CONDITIONS:
        raise ValueError(
            f"AdmissionOptions.match_conditions has {len(conditions)} conditions; the API "
            f"server allows at most {_MAX_MATCH_CONDITIONS}"
        )
    for name, expression in conditions.items():
        if not isinstance(name, str) or not is_qualified_name(name):
            raise ValueError(
                f"AdmissionOptions.match_conditions: {name!r} is not a qualified name "
                "([prefix/]name, letters, digits, '-', '_', '.', at most 63 characters)"
            )
        if not isinstance(expression, str) or not expression.strip():
            raise ValueError(
                f"AdmissionOptions.match_conditions[{name!r}] must be a non-empty CEL "
                "expression string"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionWebhookSpec:
    """One declared admission webhook, with every default resolved."""

    cls: type[Any]
    """The validator or defaulter class."""
    kind: Kind[Any]
    """What objects are decoded by: the typed class (a Resource, or any class with ``gvk``,
    ``from_object`` and ``to_object``), or a :class:`~setpoint.api.gvk.GroupVersionKind`,
    whose objects stay the JSON dicts the API server sent."""
    gvk: GroupVersionKind
    """The group, version and kind the webhook is registered for."""
    plural: str
    """The REST resource of the rule (``pods``, ``tenants``, or ``pods/ephemeralcontainers``)."""
    scope: Scope
    """The rule's scope."""
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
    validations: tuple[CelValidation, ...] = ()
    """A policy's CEL checks (validators declaring ``validations``); empty for a webhook."""

    @property
    def policy(self) -> bool:
        """A ValidatingAdmissionPolicy the API server evaluates, rather than a webhook."""
        return bool(self.validations)

    @property
    def typed(self) -> type[Any] | None:
        """The typed class objects are decoded into, or ``None`` for JSON dicts."""
        return None if isinstance(self.kind, GroupVersionKind) else cast("type[Any]", self.kind)

    @property
    def resource(self) -> type[Resource] | None:
        """The setpoint :class:`~setpoint.api.resource.Resource` class guarded, if it is one."""
        typed = self.typed
        return typed if typed is not None and issubclass(typed, Resource) else None

    @property
    def kind_label(self) -> str:
        """``Tenant tenants.setpoint.dev/v1``, for messages."""
        return f"{self.gvk.kind} {self.gvk.api_version}"


class _AdmissionBase(Generic[R]):
    """What validators and defaulters share: the resource they guard and their options."""

    webhook_options: ClassVar[AdmissionOptions] = AdmissionOptions()
    """How the API server calls this webhook; see :class:`AdmissionOptions`."""

    kind: ClassVar[GroupVersionKind | None] = None
    """The kind guarded, for a webhook over JSON dicts (``sp.CustomValidator[dict[str, Any]]``):
    any :class:`~setpoint.api.gvk.GroupVersionKind`, ``sp.kinds.Pod`` for example. A typed
    webhook (``sp.CustomValidator[Tenant]``) leaves it ``None``: its class names the kind."""

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
        kind = _kind_of(cls, base, _type_argument(cls, base), where)
        options = cls.webhook_options
        if not isinstance(options, AdmissionOptions):
            raise DeclarationError(
                f"{where}.webhook_options must be an sp.AdmissionOptions(...), not "
                f"{type(options).__name__}"
            )
        cls.__setpoint_admission__ = _spec(cls, kind, options, where, base is CustomDefaulter)


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

    validations: ClassVar[Sequence[CelValidation]] = ()
    """CEL checks the API server runs itself, declared instead of the ``validate_*``
    methods: the validator is then a ValidatingAdmissionPolicy, not a webhook (see
    :class:`CelValidation`)."""

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
    kind: Kind[Any],
    options: AdmissionOptions,
    where: str,
    mutating: bool,
) -> AdmissionWebhookSpec:
    gvk = kind.gvk
    objects = _objects_label(kind)
    defined = {
        name
        for klass in cls.__mro__
        if klass not in (CustomValidator, CustomDefaulter, _AdmissionBase)
        for name in klass.__dict__
    }
    validations: tuple[CelValidation, ...] = ()
    if mutating:
        if "default" not in defined:
            raise DeclarationError(
                f"{where} derives from sp.CustomDefaulter[{objects}] but does not "
                f"define default(self, obj: {objects}) -> None"
            )
        operations: tuple[Operation, ...] = options.operations or ("CREATE", "UPDATE")
        if "DELETE" in operations:
            raise DeclarationError(
                f"{where}.webhook_options.operations includes DELETE: a deleted object gets no "
                "defaults; use CREATE and UPDATE"
            )
    else:
        own: tuple[Operation, ...] = tuple(
            op for op in ("CREATE", "UPDATE", "DELETE") if _VALIDATE_METHODS[op] in defined
        )
        validations = _validations_of(cls, where, own)
        if validations:
            own = options.operations or ("CREATE", "UPDATE")
        if not own:
            raise DeclarationError(
                f"{where} derives from sp.CustomValidator[{objects}] but defines none of "
                "validate_create, validate_update, validate_delete (nor CEL validations)"
            )
        operations = options.operations or own
        missing = [op for op in operations if op not in own]
        if missing:
            raise DeclarationError(
                f"{where}.webhook_options.operations lists {', '.join(missing)} but the class "
                f"defines no {', '.join(_VALIDATE_METHODS[op] for op in missing)}"
            )
    plural, scope = _rule_target(kind, options, where)
    lower = gvk.kind.lower()
    prefix = "mutate" if mutating else "validate"
    path = options.path or f"/{prefix}-{gvk.group.replace('.', '-')}-{gvk.version}-{lower}"
    name = options.name or _default_name(prefix[0], lower, gvk)
    if options.name is None and (not is_dns1123_subdomain(name) or name.count(".") < 2):
        raise DeclarationError(
            f"{where}: the default webhook name {name!r} is not a DNS name of three labels; "
            "set webhook_options = sp.AdmissionOptions(name='v...example.com')"
        )
    return AdmissionWebhookSpec(
        cls=cls,
        kind=kind,
        gvk=gvk,
        plural=plural,
        scope=scope,
        mutating=mutating,
        path=path,
        name=name,
        operations=tuple(operations),
        options=options,
        validations=validations,
    )


def _validations_of(
    cls: type[Any], where: str, methods: tuple[Operation, ...]
) -> tuple[CelValidation, ...]:
    """A validator's CEL checks, checked: each a CelValidation, and not beside methods."""
    declared = cls.validations
    if isinstance(declared, (str, CelValidation)) or not isinstance(declared, Sequence):
        raise DeclarationError(
            f"{where}.validations must be a tuple of sp.CelValidation(...), not "
            f"{type(declared).__name__}"
        )
    validations = tuple(declared)
    bad = [v for v in validations if not isinstance(v, CelValidation)]
    if bad:
        raise DeclarationError(
            f"{where}.validations holds {bad[0]!r}; write sp.CelValidation('<CEL>', message=...)"
        )
    if validations and methods:
        raise DeclarationError(
            f"{where} declares both validations (CEL, a ValidatingAdmissionPolicy the API "
            f"server runs) and {', '.join(_VALIDATE_METHODS[op] for op in methods)} (a webhook); "
            "declare two classes, one of each"
        )
    return validations


def _default_name(letter: str, kind: str, gvk: GroupVersionKind) -> str:
    """The default name, kubebuilder's: ``v<kind>-<version>.<group>``, or ``...kb.io``.

    A group without a dot (the core group, ``apps``, ``batch``) would not make a name of
    three labels; kubebuilder's scaffold names such webhooks ``mpod-v1.kb.io``.
    """
    if "." in gvk.group:
        return f"{letter}{kind}-{gvk.version}.{gvk.group}"
    group = f"{gvk.group}." if gvk.group else ""
    return f"{letter}{kind}-{gvk.version}.{group}kb.io"


def _kind_of(cls: type[Any], base: type[Any], argument: Any, where: str) -> Kind[Any]:
    """The kind handle a webhook class guards, from its type argument and ``kind``."""
    declared = cls.kind
    role = f"sp.{base.__name__}"
    if argument is None:
        raise DeclarationError(
            f"{where} derives from {role} without naming the resource; write "
            f"{role}[MyResource], or {role}[dict[str, Any]] with kind = sp.kinds.Pod (any "
            "GroupVersionKind) for JSON objects"
        )
    if _is_json_object_type(argument):
        if declared is None:
            raise DeclarationError(
                f"{where} derives from {role}[dict[str, Any]] without naming the kind; set the "
                "class attribute kind = sp.kinds.Pod (any sp.GroupVersionKind)"
            )
        if not isinstance(declared, GroupVersionKind):
            raise DeclarationError(
                f"{where}.kind is {declared!r}, not a GroupVersionKind; for typed objects write "
                f"{role}[TheClass] instead of {role}[dict[str, Any]]"
            )
        return declared
    if _is_typed_class(argument):
        if declared is not None and declared != argument.gvk:
            raise DeclarationError(
                f"{where} names {_short(argument)} ({argument.gvk}) and kind = {declared}; "
                f"a typed webhook's class names its kind: drop the kind attribute"
            )
        return cast("Kind[Any]", argument)
    raise DeclarationError(
        f"{where} names {argument!r}, which is not a Resource class nor another typed class "
        "(with gvk, from_object and to_object) nor dict[str, Any]; name the @sp.resource class "
        "it guards, or dict[str, Any] with kind = sp.kinds.Pod"
    )


def _is_json_object_type(argument: Any) -> bool:
    """Whether a type argument means JSON objects (``dict[str, Any]``, ``Mapping[...]``)."""
    origin = get_origin(argument) or argument
    return origin is dict or origin is Mapping


def _is_typed_class(argument: Any) -> bool:
    """Whether a type argument is a typed class (:class:`~setpoint.api.types.TypedObject`)."""
    return (
        isinstance(argument, type)
        and isinstance(getattr(argument, "gvk", None), GroupVersionKind)
        and callable(getattr(argument, "from_object", None))
        and callable(getattr(argument, "to_object", None))
    )


def _objects_label(kind: Kind[Any]) -> str:
    """What the methods take, for messages: the class's name or ``dict[str, Any]``."""
    return "dict[str, Any]" if isinstance(kind, GroupVersionKind) else _short(cast("type", kind))


def _rule_target(kind: Kind[Any], options: AdmissionOptions, where: str) -> tuple[str, Scope]:
    """The REST resource and scope of the webhook's rule (see :attr:`AdmissionOptions.resource`)."""
    gvk = kind.gvk
    info: ResourceInfo | None
    resource_info = getattr(kind, "resource_info", None)
    if not isinstance(kind, GroupVersionKind) and callable(resource_info):
        info = resource_info()
    else:
        info = BUILTIN_RESOURCES.get(gvk)
    if options.resource is not None:
        known: Scope = "*" if info is None else ("Namespaced" if info.namespaced else "Cluster")
        return options.resource, options.scope or known
    if info is None:
        raise DeclarationError(
            f"{where}: setpoint does not know the REST resource of {gvk.kind} {gvk.api_version}; "
            "name it: webhook_options = sp.AdmissionOptions(resource='<plural>', "
            "scope='Namespaced')"
        )
    return info.plural, options.scope or ("Namespaced" if info.namespaced else "Cluster")


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
