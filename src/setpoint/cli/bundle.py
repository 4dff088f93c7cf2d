"""``setpoint generate bundle``: an OLM bundle of the operator (``registry+v1``).

What ``operator-sdk generate bundle`` makes from ``kustomize build config/manifests``,
made here from ``config/default`` and the operator's Python types:

* ``manifests/<package>.clusterserviceversion.yaml``: the ClusterServiceVersion. Its owned
  CRDs carry each version's description (the resource class's docstring) and display name;
  ``alm-examples`` holds one example per kind, built from the schema's examples and
  defaults (``sp.field(example=...)``) and checked against the CRD's schema; the install
  strategy is the Deployment, the ClusterRoles bound to its ServiceAccount
  (``clusterPermissions``) and its Roles (``permissions``) as kustomize renders them; the
  webhook configurations and the CRDs' conversion become ``webhookdefinitions`` (OLM issues
  and rotates the certificate itself, so the Deployment reads it from the directory OLM
  mounts instead of managing a Secret).
* ``manifests/`` also holds the CRDs and the other objects a bundle may carry (Services,
  ClusterRoles not bound to the operator, ...); objects OLM cannot install from a bundle
  (a PersistentVolumeClaim, an admission policy) are left out and listed.
* ``metadata/annotations.yaml`` and ``bundle.Dockerfile``: the package, channels and media
  type, as labels of the bundle image too.

The result is meant for the Operator Framework's own validation library with its
OperatorHub checks (``scripts/olmcheck``, built by ``scripts/build_helm.py``).
"""

from __future__ import annotations

import argparse
import base64
import copy
import inspect
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from setpoint.cli.helm import OperatorSources, TextFile, load_sources, project_name
from setpoint.crd import render_yaml

__all__ = [
    "BUNDLE_KINDS",
    "BundleOptions",
    "BundleResult",
    "example_object",
    "make_bundle",
    "register",
]

BUNDLE_KINDS = frozenset(
    {
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "ConsoleCLIDownload",
        "ConsoleLink",
        "ConsoleQuickStart",
        "ConsoleYAMLSample",
        "CustomResourceDefinition",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "PriorityClass",
        "PrometheusRule",
        "Role",
        "RoleBinding",
        "Secret",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
        "VerticalPodAutoscaler",
    }
)
"""The kinds OLM installs from a bundle's ``manifests/`` besides the CSV (its
``registry+v1`` format; anything else is refused by OLM, so it is left out and listed)."""

_CERT_FLAGS = (
    "--webhook-cert-secret",
    "--webhook-service",
    "--webhook-inject",
    "--webhook-cert-dir",
)
"""The manager's flags of the self-managed certificate: OLM brings its own."""


@dataclass(frozen=True)
class BundleOptions:
    """The bundle's package, version and the CSV's descriptive fields."""

    package: str
    """The OLM package name (the project's name)."""
    version: str = "0.1.0"
    """The operator's version (SemVer): ``metadata.name`` is ``<package>.v<version>``."""
    channels: tuple[str, ...] = ("alpha",)
    """The channels the bundle is published in; the first is the default."""
    display_name: str = ""
    """The CSV's display name (default: the package's, capitalized)."""
    description: str = ""
    """The CSV's long description (default: the operator package's docstring)."""
    provider: str = "setpoint"
    """Who publishes the operator."""
    maintainers: tuple[tuple[str, str], ...] = (("setpoint", "maintainers@setpoint.dev"),)
    """(name, email) of each maintainer."""
    links: tuple[tuple[str, str], ...] = (("Documentation", "https://setpoint.dev"),)
    """(name, url) links shown with the operator."""
    categories: tuple[str, ...] = ("Developer Tools",)
    """OperatorHub categories (checked against OperatorHub's list)."""
    capabilities: str = "Basic Install"
    """The operator's capability level."""
    min_kube_version: str = "1.30.0"
    """The oldest Kubernetes the operator supports."""
    keywords: tuple[str, ...] = field(default_factory=tuple)
    """Search keywords (default: the package name and ``setpoint``)."""
    replaces: str | None = None
    """The CSV this one upgrades (``<package>.v<previous>``)."""


@dataclass(frozen=True)
class BundleResult:
    """The bundle's files and what was left out of it."""

    files: dict[str, str]
    """Path under the bundle directory -> text."""
    skipped: tuple[str, ...]
    """``Kind/name`` of each object OLM cannot install from a bundle (left out)."""


def _display(name: str) -> str:
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("-", " ").split()
    return " ".join(word[:1].upper() + word[1:] for word in words)


def _plain(text: str) -> str:
    """Docstring text without Sphinx roles and literals (``:class:`Tenant``` -> Tenant)."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def _first_paragraph(text: str | None) -> str:
    if not text:
        return ""
    return _plain(" ".join(inspect.cleandoc(text).split("\n\n", 1)[0].split()))


def _placeholder(schema: Mapping[str, Any], name: str, index: int = 0) -> Any:
    """A value the schema admits, for a required field without an example or default."""
    if "example" in schema:
        return copy.deepcopy(schema["example"])
    if "default" in schema:
        return copy.deepcopy(schema["default"])
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return _example_of(schema)
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        items = schema.get("items", {})
        return [_placeholder(items, name, i) for i in range(count)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    if schema.get("x-kubernetes-int-or-string"):
        return "1"
    text = "example" if not index else f"example-{index}"
    minimum = int(schema.get("minLength", 0))
    return text + "x" * max(0, minimum - len(text))


def _example_of(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties", {})
    out: dict[str, Any] = {}
    for name, sub in properties.items():
        if name in schema.get("required", ()) or "example" in sub:
            out[name] = _placeholder(sub, name)
    return out


def example_object(crd: Mapping[str, Any], version_name: str | None = None) -> dict[str, Any]:
    """An example of the CRD's kind at a version (default: storage), for ``alm-examples``.

    Required fields take their schema ``example`` (``sp.field(example=...)``), else their
    default, else a placeholder of their type; fields with an example are filled too. The
    example is checked against the version's schema (setpoint's validator, the one that
    agrees with the API server).

    Raises:
        ValueError: the schema refuses the example; the message names the field to give an
            ``sp.field(example=...)``.

    """
    from setpoint.crd.objects import validate_object

    spec = crd["spec"]
    version = next(
        v
        for v in spec["versions"]
        if (v["name"] == version_name if version_name else v.get("storage"))
    )
    schema = version["schema"]["openAPIV3Schema"]
    obj: dict[str, Any] = {
        "apiVersion": f"{spec['group']}/{version['name']}",
        "kind": spec["names"]["kind"],
        "metadata": {"name": "example"},
    }
    if spec.get("scope") == "Namespaced":
        obj["metadata"]["namespace"] = "default"
    body = {k: v for k, v in _example_of(schema).items() if k not in ("status", "metadata")}
    body.pop("apiVersion", None)
    body.pop("kind", None)
    obj.update(body)
    errors = validate_object(obj, schema)
    if errors:
        where = _bad_field(obj, schema, "") or "the object"
        raise ValueError(
            f"the example {spec['names']['kind']} {version['name']} built from the schema is "
            f"invalid at {where} ({errors[0].message}); give that field an example with "
            "sp.field(example=...)"
        )
    return obj


def _bad_field(value: Any, schema: Mapping[str, Any], path: str) -> str | None:
    """The deepest field of ``value`` the schema refuses (``.spec.adminGroup``), if any."""
    from setpoint.crd.structural import validate_value

    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value and name != "metadata":
                found = _bad_field(value[name], sub, f"{path}.{name}")
                if found:
                    return found
    if path and validate_value(value, schema, ()):
        return path
    return None


def _bound_roles(
    documents: Sequence[Mapping[str, Any]], account: str, binding_kind: str
) -> list[str]:
    names = []
    for document in documents:
        if document.get("kind") != binding_kind:
            continue
        if any(
            s.get("kind") == "ServiceAccount" and s.get("name") == account
            for s in document.get("subjects", ())
        ):
            names.append(document["roleRef"]["name"])
    return names


def _manager_container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    return next((c for c in containers if c.get("name") == "manager"), containers[0])


def _olm_deployment(deployment: Mapping[str, Any], webhooks: bool) -> dict[str, Any]:
    spec = copy.deepcopy(dict(deployment["spec"]))
    container = _manager_container({"spec": spec})
    args = [a for a in container.get("args", ()) if not a.startswith(_CERT_FLAGS)]
    if webhooks:
        # OLM mounts the serving certificate it issues where a manager in a Pod looks by default.
        from setpoint.webhook.server import POD_CERT_DIR

        args.append(f"--webhook-cert-dir={POD_CERT_DIR}")
    container["args"] = args
    return spec


def _webhook_definitions(
    sources: OperatorSources,
    documents: Sequence[Mapping[str, Any]],
    deployment_name: str,
    port: int,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for document in documents:
        kind = document.get("kind")
        if kind not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        for hook in document.get("webhooks", ()):
            definition: dict[str, Any] = {
                "type": "ValidatingAdmissionWebhook"
                if kind.startswith("Validating")
                else "MutatingAdmissionWebhook",
                "generateName": hook["name"],
                "deploymentName": deployment_name,
                "containerPort": 443,
                "targetPort": port,
                "admissionReviewVersions": hook.get("admissionReviewVersions", ["v1"]),
                "failurePolicy": hook.get("failurePolicy", "Fail"),
                "sideEffects": hook.get("sideEffects", "None"),
                "rules": hook.get("rules", []),
                "webhookPath": hook["clientConfig"]["service"]["path"],
            }
            for key in (
                "matchPolicy",
                "objectSelector",
                "timeoutSeconds",
                "reinvocationPolicy",
            ):
                if key in hook:
                    definition[key] = hook[key]
            out.append(definition)
    for name in sources.conversion_crds:
        out.append(
            {
                "type": "ConversionWebhook",
                "generateName": f"c{name}",
                "deploymentName": deployment_name,
                "containerPort": 443,
                "targetPort": port,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "conversionCRDs": [name],
                "webhookPath": "/convert",
            }
        )
    return out


def _webhook_port(container: Mapping[str, Any]) -> int:
    for port in container.get("ports", ()):
        if port.get("name") == "webhook-server":
            return int(port["containerPort"])
    return 9443


def _owned(sources: OperatorSources, crds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    docs: dict[tuple[str, str, str], str] = {}
    for cls in sources.resources:
        gvk = cls.declaration().gvk
        docs[(gvk.group, gvk.version, gvk.kind)] = _first_paragraph(cls.__doc__)
    owned = []
    for crd in crds:
        spec = crd["spec"]
        kind = spec["names"]["kind"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            description = docs.get((spec["group"], version["name"], kind)) or _first_paragraph(
                version["schema"]["openAPIV3Schema"].get("description")
            )
            owned.append(
                {
                    "name": crd["metadata"]["name"],
                    "version": version["name"],
                    "kind": kind,
                    "displayName": _display(kind),
                    "description": description or f"A {kind}.",
                }
            )
    return owned


def make_bundle(
    sources: OperatorSources,
    documents: Sequence[Mapping[str, Any]],
    options: BundleOptions,
    *,
    package_doc: str | None = None,
) -> BundleResult:
    """The bundle of the operator whose ``config/default`` renders ``documents``.

    ``sources`` gives the CRDs' descriptions and examples (the Python types);
    ``documents`` are what ``kubectl kustomize config/default`` renders (the Deployment,
    RBAC, Services and webhook configurations as deployed, with their final names).

    Raises:
        ValueError: no Deployment among ``documents``, or an invalid example.

    """
    deployments = [d for d in documents if d.get("kind") == "Deployment"]
    if not deployments:
        raise ValueError("the kustomization renders no Deployment: nothing for OLM to install")
    deployment = deployments[0]
    deployment_name = deployment["metadata"]["name"]
    pod = deployment["spec"]["template"]["spec"]
    account = pod.get("serviceAccountName", "default")
    container = _manager_container(deployment)
    crds = [d for d in documents if d.get("kind") == "CustomResourceDefinition"]
    by_name = {(d.get("kind"), d["metadata"]["name"]): d for d in documents}
    cluster_roles = _bound_roles(documents, account, "ClusterRoleBinding")
    roles = [
        name
        for name in _bound_roles(documents, account, "RoleBinding")
        if not name.endswith("webhook-certificate-role")
    ]
    serves_webhooks = sources.serves_webhooks
    definitions = _webhook_definitions(
        sources, documents, deployment_name, _webhook_port(container)
    )
    examples = [
        example_object(crd, version["name"])
        for crd in crds
        for version in crd["spec"]["versions"]
        if version.get("served", True)
    ]
    install: dict[str, Any] = {
        "strategy": "deployment",
        "spec": {
            "deployments": [
                {
                    "name": deployment_name,
                    "label": dict(deployment["metadata"].get("labels", {})),
                    "spec": _olm_deployment(deployment, serves_webhooks),
                }
            ],
            "clusterPermissions": [
                {
                    "serviceAccountName": account,
                    "rules": [
                        rule
                        for name in cluster_roles
                        for rule in by_name[("ClusterRole", name)]["rules"]
                    ],
                }
            ],
            "permissions": [
                {
                    "serviceAccountName": account,
                    "rules": [rule for name in roles for rule in by_name[("Role", name)]["rules"]],
                }
            ],
        },
    }
    if not roles:
        del install["spec"]["permissions"]
    name = options.package
    description = options.description or _plain(inspect.cleandoc(package_doc or "")) or name
    csv: dict[str, Any] = {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": f"{name}.v{options.version}",
            "namespace": "placeholder",
            "annotations": {
                "alm-examples": json.dumps(examples, indent=2, sort_keys=True),
                "capabilities": options.capabilities,
                "categories": ", ".join(options.categories),
                "containerImage": container.get("image", ""),
                "description": _first_paragraph(description)[:140],
                "operators.operatorframework.io/builder": "setpoint",
                "support": options.provider,
            },
        },
        "spec": {
            "displayName": options.display_name or _display(name),
            "description": description,
            "version": options.version,
            "maturity": options.channels[0],
            "minKubeVersion": options.min_kube_version,
            "provider": {"name": options.provider},
            "icon": [{"base64data": _icon(name), "mediatype": "image/svg+xml"}],
            "maintainers": [{"name": n, "email": e} for n, e in options.maintainers],
            "links": [{"name": n, "url": u} for n, u in options.links],
            "keywords": list(options.keywords or (name, "setpoint")),
            "installModes": [
                {"type": "OwnNamespace", "supported": False},
                {"type": "SingleNamespace", "supported": False},
                {"type": "MultiNamespace", "supported": False},
                {"type": "AllNamespaces", "supported": True},
            ],
            "customresourcedefinitions": {"owned": _owned(sources, crds)},
            "install": install,
        },
    }
    if definitions:
        csv["spec"]["webhookdefinitions"] = definitions
    if options.replaces:
        csv["spec"]["replaces"] = options.replaces
    files = {f"manifests/{name}.clusterserviceversion.yaml": render_yaml([csv])}
    skipped = []
    in_csv = {("Deployment", deployment_name), ("ServiceAccount", account)}
    in_csv |= {("ClusterRole", n) for n in cluster_roles} | {("Role", n) for n in roles}
    for document in documents:
        kind = document.get("kind", "")
        object_name = document["metadata"]["name"]
        if (kind, object_name) in in_csv or kind in (
            "Namespace",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ):
            continue
        if kind in ("ClusterRoleBinding", "RoleBinding") and (
            document["roleRef"]["name"] in cluster_roles + roles
        ):
            continue
        if kind == "Service" and object_name.endswith("webhook-service"):
            continue  # OLM makes the webhook Service itself (<deployment>-service)
        if kind.endswith(("Role", "RoleBinding")) and "webhook-certificate" in object_name:
            continue  # OLM issues the certificate; the operator needs no Secret rights
        if kind not in BUNDLE_KINDS:
            skipped.append(f"{kind}/{object_name}")
            continue
        files[f"manifests/{object_name}_{kind.lower()}.yaml"] = render_yaml(
            [_without_namespace(document)]
        )
    channels = ",".join(options.channels)
    annotations = {
        "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": name,
        "operators.operatorframework.io.bundle.channels.v1": channels,
        "operators.operatorframework.io.bundle.channel.default.v1": options.channels[0],
    }
    files["metadata/annotations.yaml"] = yaml.safe_dump(
        {"annotations": annotations}, sort_keys=False
    )
    files["bundle.Dockerfile"] = (
        "# Written by `setpoint generate bundle`: the bundle image (FROM scratch, only data).\n"
        "FROM scratch\n\n"
        + "".join(f"LABEL {key}={value}\n" for key, value in annotations.items())
        + "\nCOPY manifests /manifests/\nCOPY metadata /metadata/\n"
    )
    return BundleResult(files=files, skipped=tuple(skipped))


def _icon(name: str) -> str:
    """A plain SVG icon: the operator's initial on a disc (base64), until one is given."""
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">'
        '<circle cx="32" cy="32" r="30" fill="#326ce5"/>'
        '<text x="32" y="43" font-size="32" text-anchor="middle" fill="#fff" '
        f'font-family="sans-serif">{name[:1].upper()}</text></svg>'
    )
    return base64.b64encode(svg.encode()).decode()


def _without_namespace(document: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(document))
    out.get("metadata", {}).pop("namespace", None)
    return out


def _pair(text: str, what: str) -> tuple[str, str]:
    """``NAME <VALUE>`` or ``NAME=VALUE`` -> (NAME, VALUE)."""
    match = re.fullmatch(r"\s*(.+?)\s*(?:<([^>]+)>|=(\S+))\s*", text)
    if not match:
        raise ValueError(f"{what} {text!r} must be 'NAME <VALUE>' or NAME=VALUE")
    return match.group(1), match.group(2) or match.group(3)


def _cmd_bundle(args: argparse.Namespace) -> int:
    from setpoint.cli.installer import kustomize_documents, set_image
    from setpoint.crd import CRDGenerationError, LoadError, write_manifests

    try:
        sources = load_sources(args.targets, package=args.package)
        documents = kustomize_documents(args.kustomize)
        if args.image:
            set_image(documents, args.image)
        options = BundleOptions(
            package=project_name(args.name, sources.package),
            version=args.version,
            channels=tuple(args.channel or ["alpha"]),
            provider=args.provider,
            maintainers=tuple(_pair(m, "--maintainer") for m in args.maintainer)
            or BundleOptions.maintainers,
            links=tuple(_pair(link, "--link") for link in args.link) or BundleOptions.links,
            categories=tuple(args.category or ["Developer Tools"]),
            min_kube_version=args.min_kube_version,
            replaces=args.replaces,
        )
        module = sys.modules.get(sources.package)
        result = make_bundle(
            sources, documents, options, package_doc=module.__doc__ if module else None
        )
        written = write_manifests(
            [TextFile(path, (), text) for path, text in sorted(result.files.items())],
            args.output_dir,
            check=args.check,
        )
    except (LoadError, CRDGenerationError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    stale = 0
    for item in written:
        verdict: str = item.status
        if args.check:
            stale += item.status != "unchanged"
            verdict = "up to date" if item.status == "unchanged" else "OUT OF DATE"
        print(f"{verdict:<12} {item.path}")
    for skipped in result.skipped:
        print(f"left out    {skipped} (OLM installs no such kind from a bundle)")
    return 1 if stale else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``generate bundle`` to the ``generate`` subcommands."""
    bundle = sub.add_parser(
        "bundle",
        help="write an OLM bundle: a ClusterServiceVersion, the CRDs, metadata and "
        "bundle.Dockerfile",
        description="Generate an OLM registry+v1 bundle from the operator's Python types "
        "(owned CRDs, descriptions, examples) and config/default as kustomize renders it "
        "(the install strategy: Deployment and RBAC; webhook definitions).",
    )
    bundle.add_argument(
        "targets",
        nargs="+",
        metavar="MODULE_OR_PATH",
        help="importable module/package names, .py files or directories to scan",
    )
    bundle.add_argument("--output-dir", type=Path, default=Path("bundle"), help="default: bundle")
    bundle.add_argument(
        "--kustomize",
        type=Path,
        default=Path("config/default"),
        metavar="DIR",
        help="the kustomization that installs the operator (default: config/default)",
    )
    bundle.add_argument("--name", default=None, help="the OLM package (default: the project's)")
    bundle.add_argument("--package", default=None, help="the module `setpoint run` starts")
    bundle.add_argument("--image", default=None, help="the manager's image")
    bundle.add_argument("--version", default="0.1.0", help="the operator's version (SemVer)")
    bundle.add_argument(
        "--channel", action="append", help="a channel (repeat; the first is the default)"
    )
    bundle.add_argument("--replaces", default=None, help="the CSV this one upgrades")
    bundle.add_argument("--provider", default="setpoint", help="who publishes the operator")
    bundle.add_argument("--maintainer", action="append", default=[], help="'NAME <EMAIL>' (repeat)")
    bundle.add_argument("--link", action="append", default=[], help="'NAME <URL>' (repeat)")
    bundle.add_argument("--category", action="append", help="an OperatorHub category (repeat)")
    bundle.add_argument(
        "--min-kube-version", default="1.30.0", help="the oldest Kubernetes supported"
    )
    bundle.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if any bundle file is missing or out of date",
    )
    bundle.set_defaults(func=_cmd_bundle)
