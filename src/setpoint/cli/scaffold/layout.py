"""What each scaffolding command writes: the files of a project, from its ``PROJECT``.

Two kinds of files come out of here:

- *wiring* files, regenerated from the whole project by every command (the controllers'
  and webhooks' ``setup``, the kustomizations that list kinds, the Makefile's manifest
  lines, ``PROJECT`` itself);
- files written once for one kind, version or webhook (its types, controller, tests,
  sample), which then belong to the user.

Both go through the same guard (:func:`setpoint.cli.scaffold.files.plan_files`): a file is only
ever replaced while its content is still what setpoint wrote.
"""

from __future__ import annotations

import json
import textwrap

from setpoint.cli.scaffold.files import render_template
from setpoint.cli.scaffold.project import Project, ScaffoldedResource

__all__ = [
    "admission_files",
    "api_files",
    "project_files",
    "wiring_files",
]


def _base_values(project: Project) -> dict[str, str]:
    return {
        "project_name": project.name,
        "package": project.package,
        "domain": project.domain,
    }


def project_files(project: Project, requirement: str, testing_requirement: str) -> dict[str, str]:
    """The files ``setpoint init`` writes (besides the wiring files)."""
    values = _base_values(project) | {
        "setpoint_requirement": requirement,
        "setpoint_testing_requirement": testing_requirement,
    }
    pkg = project.package
    out = {
        "pyproject.toml": render_template("project/pyproject.toml", values),
        "README.md": render_template("project/README.md", values),
        "Dockerfile": render_template("project/Dockerfile", values),
        ".gitignore": render_template("project/gitignore", values),
        ".dockerignore": render_template("project/dockerignore", values),
        f"{pkg}/__init__.py": render_template("project/package_init.py", values),
        f"{pkg}/py.typed": "",
        f"{pkg}/api/__init__.py": render_template("project/api_init.py", values),
        "tests/__init__.py": "",
        "tests/conftest.py": render_template("project/conftest.py", values),
        "tests/test_project.py": render_template("project/test_project.py", values),
        "tests/e2e/__init__.py": "",
        "tests/e2e/test_e2e.py": render_template("tests/test_e2e.py", values),
    }
    for name in (
        "crd/kustomizeconfig.yaml",
        "rbac/kustomization.yaml",
        "rbac/service_account.yaml",
        "rbac/role_binding.yaml",
        "rbac/leader_election_role.yaml",
        "rbac/leader_election_role_binding.yaml",
        "rbac/metrics_auth_role.yaml",
        "rbac/metrics_auth_role_binding.yaml",
        "rbac/metrics_reader_role.yaml",
        "manager/kustomization.yaml",
        "manager/manager.yaml",
        "prometheus/kustomization.yaml",
        "prometheus/monitor.yaml",
        "default/metrics_service.yaml",
        "network-policy/allow-metrics-traffic.yaml",
    ):
        out[f"config/{name}"] = render_template(f"config/{name}", values)
    return out


def _resource_values(project: Project, resource: ScaffoldedResource) -> dict[str, str]:
    names = resource.names
    namespaced = resource.namespaced
    sample_metadata: dict[str, str] = {"name": "sample"}
    if namespaced:
        sample_metadata["namespace"] = "default"
    class_name = names.kind
    if resource.spoke_of is not None:
        class_name = names.kind + names.version[0].upper() + names.version[1:]
    module_path = f"{project.package}/api/{names.group_module}/{names.version}/{names.module}.py"
    return _base_values(project) | {
        "kind": names.kind,
        "version": names.version,
        "group_module": names.group_module,
        "full_group": names.full_group,
        "api_version": names.api_version,
        "plural": names.plural,
        "module": names.module,
        "class_name": class_name,
        "hub_version": resource.spoke_of or names.version,
        "spoke_path": module_path,
        "controller_name": f"{names.module.replace('_', '-')}",
        "scope_argument": "" if namespaced else ', scope="Cluster"',
        "sample_metadata": json.dumps(sample_metadata),
        "namespace_argument": ', namespace="default"' if namespaced else "",
        "integration_metadata": (
            '{"name": name, "namespace": namespace}' if namespaced else '{"name": name}'
        ),
        "integration_namespace_argument": ", namespace=namespace" if namespaced else "",
        "integration_namespace_keyword": "\n            namespace=namespace," if namespaced else "",
        "patch_namespace_keyword": "\n        namespace=namespace," if namespaced else "",
        "a_kind": f"{_article(names.kind)} {names.kind}",
        "a_kind_capital": f"{_article(names.kind).capitalize()} {names.kind}",
        "cluster_note": "" if namespaced else " (the kind is cluster-scoped)",
        "cluster_cleanup": "" if namespaced else f"\n    await k8s.delete({names.kind}, name)",
    }


def _article(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


def _package_inits(project: Project, resource: ScaffoldedResource) -> dict[str, str]:
    names = resource.names
    base = f"{project.package}/api/{names.group_module}"
    return {
        f"{base}/__init__.py": f'"""The {names.full_group} API group."""\n',
        f"{base}/{names.version}/__init__.py": (
            f'"""Version {names.version} of the {names.full_group} API group."""\n'
        ),
    }


def sample_path(resource: ScaffoldedResource) -> str:
    """The sample object of ``resource`` under ``config/samples``."""
    names = resource.names
    return f"config/samples/{names.group}_{names.version}_{names.module}.yaml"


def api_files(project: Project, resource: ScaffoldedResource) -> dict[str, str]:
    """The files ``setpoint create api`` writes once for one kind and version."""
    names = resource.names
    values = _resource_values(project, resource)
    pkg = project.package
    out = _package_inits(project, resource)
    module = f"{pkg}/api/{names.group_module}/{names.version}/{names.module}.py"
    sample = {
        "apiVersion": names.api_version,
        "kind": names.kind,
        "metadata": {"name": f"{names.module.replace('_', '-')}-sample"},
        "spec": {"size": 1},
    }
    out[sample_path(resource)] = (
        f"# A {names.kind} to try: kubectl apply -f {sample_path(resource)}\n" + _yaml(sample)
    )
    if resource.spoke_of is None:
        out[module] = render_template("api/hub.py", values)
        if resource.controller:
            out[f"{pkg}/controllers/{names.module}.py"] = render_template(
                "controller/controller.py", values
            )
            out[f"tests/test_unit_{names.module}.py"] = render_template(
                "tests/test_unit_controller.py", values
            )
            out[f"tests/test_{names.module}.py"] = render_template(
                "tests/test_controller.py", values
            )
    else:
        out[module] = render_template("api/spoke.py", values)
        api = f"{pkg}.api.{names.group_module}"
        imports = {
            f"{api}.{resource.spoke_of}.{names.module}": names.kind,
            f"{api}.{names.version}.{names.module}": values["class_name"],
        }
        out[f"tests/test_{names.module}_{names.version}_conversion.py"] = render_template(
            "tests/test_conversion.py",
            values
            | {
                # isort's order: the hub may sort after the spoke (v1alpha1 before v1beta1).
                "conversion_imports": "\n".join(
                    _from_import(module, [imports[module]])
                    for module in sorted(imports, key=str.lower)
                )
            },
        )
    return out


def _from_import(module: str, names: list[str]) -> str:
    """``from module import (...)``, one name a line: stable under ruff's isort and format."""
    return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")"


def _isort_order(names: list[str]) -> list[str]:
    """Names in isort's order: CONSTANTS, then Classes, then functions."""

    def key(name: str) -> tuple[int, str]:
        if name.isupper():
            return (0, name)
        return (1, name) if name[0].isupper() else (2, name)

    return sorted(names, key=key)


def _join_blocks(blocks: list[str]) -> str:
    """Top-level blocks separated by two blank lines, as ruff format wants."""
    return "\n\n\n".join(b.strip("\n") for b in blocks if b.strip())


def admission_files(project: Project, hub: ScaffoldedResource) -> dict[str, str]:
    """The webhook module and tests of ``hub``'s kind, for the admission webhooks it has."""
    values = _resource_values(project, hub)
    hooks = hub.webhooks
    kind = hub.names.kind
    exported: list[str] = []
    constants: list[str] = []
    what = []
    parts = []
    if hooks.defaulting:
        exported += ["DEFAULT_SIZE", f"{kind}Defaulter"]
        constants.append("DEFAULT_SIZE")
        what.append("a defaulter")
        parts.append("defaulter")
    if hooks.validation:
        exported += ["MAX_SIZE", f"{kind}Validator", "check"]
        constants.append("MAX_SIZE")
        what.append("a validator")
        parts.append("validator")
    module = f"{project.package}.webhooks.{hub.names.module}"
    body = _join_blocks([render_template(f"webhook/{part}.py", values) for part in parts])
    webhook_module = render_template(
        "webhook/admission.py",
        values
        | {
            "what": " and ".join(what),
            "webhook_all": ", ".join(json.dumps(n) for n in _isort_order(exported)),
            "body": body,
        },
    )
    unit_names = _isort_order([n for n in exported if n != "check"])
    third_party = "\nimport pytest\nimport setpoint as sp\n" if hooks.validation else ""
    unit = render_template(
        "tests/test_unit_webhook.py",
        values
        | {
            "unit_imports": third_party,
            "unit_webhook_import": _from_import(module, unit_names),
            "unit_tests": _join_blocks(
                [render_template(f"tests/unit_{p}.py", values) for p in parts]
            ),
        },
    )
    integration_imports = []
    if not hub.namespaced and hooks.defaulting:
        names = hub.names
        integration_imports.append(
            _from_import(
                f"{project.package}.api.{names.group_module}.{names.version}.{names.module}",
                [names.kind],
            )
        )
    integration_imports.append(_from_import(module, _isort_order(constants)))
    integration = render_template(
        "tests/test_webhook.py",
        values
        | {
            "integration_imports": "\n".join(integration_imports),
            "integration_tests": _join_blocks(
                [render_template(f"tests/integration_{p}.py", _cleanup(values, hub)) for p in parts]
            ),
        },
    )
    return {
        f"{project.package}/webhooks/{hub.names.module}.py": webhook_module,
        f"tests/test_unit_{hub.names.module}_webhook.py": unit,
        f"tests/test_{hub.names.module}_webhook.py": integration,
    }


def _cleanup(values: dict[str, str], hub: ScaffoldedResource) -> dict[str, str]:
    if hub.namespaced:
        return values | {"cleanup_defaulted": ""}
    return values | {"cleanup_defaulted": f"\n    await k8s.delete({hub.names.kind}, name)"}


def wiring_files(project: Project) -> dict[str, str]:
    """The files every command regenerates from the whole project."""
    pkg = project.package
    hubs = [r for r in project.resources if r.is_hub]
    controllers = [r for r in hubs if r.controller]
    converting = [r for r in hubs if r.webhooks.conversion]
    admitting = [r for r in hubs if r.webhooks.admission]
    any_webhooks = bool(converting or admitting)
    out = {
        f"{pkg}/controllers/__init__.py": _controllers_init(project, controllers),
        f"{pkg}/webhooks/__init__.py": _webhooks_init(project, converting, admitting),
        "Makefile": render_template(
            "project/Makefile",
            _base_values(project)
            | {
                "setpoint_install": project.setpoint_install,
                "webhook_manifests_line": (
                    f"\t$(VENV)/bin/setpoint generate webhook {pkg} --output-dir config\n"
                    if admitting
                    else ""
                ),
            },
        ),
        "config/crd/kustomization.yaml": _crd_kustomization(project, hubs, any_webhooks),
        "config/samples/kustomization.yaml": _yaml_with_header(
            "# The sample objects: kubectl apply -k config/samples",
            {
                "resources": [
                    sample_path(r).removeprefix("config/samples/") for r in project.resources
                ]
            },
        ),
        "config/default/kustomization.yaml": _default_kustomization(
            project, admitting, any_webhooks
        ),
        "config/network-policy/kustomization.yaml": _network_policy_kustomization(any_webhooks),
    }
    if any_webhooks:
        values = _base_values(project) | {
            "webhook_manifests_resource": "- manifests.yaml" if admitting else "",
        }
        for name in (
            "webhook/kustomization.yaml",
            "webhook/service.yaml",
            "certmanager/kustomization.yaml",
            "certmanager/certificate.yaml",
            "default/manager_webhook_patch.yaml",
            "network-policy/allow-webhook-traffic.yaml",
        ):
            out[f"config/{name}"] = render_template(f"config/{name}", values)
        inject = f"{project.name}-system/{project.name}-serving-cert"
        for hub in converting:
            out[f"config/crd/patches/cainjection_in_{hub.names.plural}.yaml"] = _yaml_with_header(
                "# cert-manager's CA injector writes the webhook CA into this CRD's caBundle.",
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {
                        "name": hub.names.crd_name,
                        "annotations": {"cert-manager.io/inject-ca-from": inject},
                    },
                },
            )
        if admitting:
            documents = []
            kinds = []
            if any(r.webhooks.defaulting for r in admitting):
                kinds.append(("MutatingWebhookConfiguration", "mutating-webhook-configuration"))
            if any(r.webhooks.validation for r in admitting):
                kinds.append(("ValidatingWebhookConfiguration", "validating-webhook-configuration"))
            for kind, name in kinds:
                documents.append(
                    _yaml(
                        {
                            "apiVersion": "admissionregistration.k8s.io/v1",
                            "kind": kind,
                            "metadata": {
                                "name": name,
                                "annotations": {"cert-manager.io/inject-ca-from": inject},
                            },
                        }
                    )
                )
            out["config/default/webhookcainjection_patch.yaml"] = (
                "# cert-manager's CA injector writes the webhook CA into these configurations.\n"
                + "---\n".join(documents)
            )
    return out


def _controllers_init(project: Project, controllers: list[ScaffoldedResource]) -> str:
    modules = sorted(r.names.module for r in controllers)
    imports = (
        "\n" + _from_import(f"{project.package}.controllers", modules) + "\n" if modules else ""
    )
    registered = "".join(
        f'    (\n        "{project.package}.api.{r.names.group_module}.{r.names.version}.'
        f'{r.names.module}",\n        "{r.names.kind}",\n    ),\n'
        for r in controllers
    )
    calls = "".join(f"    {r.names.module}.setup(manager)\n" for r in controllers)
    if not calls:
        calls = "    del manager  # no kinds yet: `setpoint create api` adds them\n"
    return (
        '"""The operator\'s controllers, one module per kind.\n\n'
        "Written by setpoint from PROJECT (``setpoint create api`` adds a kind here): edit\n"
        'the kinds\' modules, not this file.\n"""\n\n'
        "from __future__ import annotations\n\n"
        "import setpoint as sp\n"
        + imports
        + '\n__all__ = ["REGISTERED", "setup"]\n\n'
        + (
            "REGISTERED: tuple[tuple[str, str], ...] = (\n" + registered + ")\n"
            if registered
            else "REGISTERED: tuple[tuple[str, str], ...] = ()\n"
        )
        + '"""(API module, kind) of every kind :func:`setup` registers a controller for."""\n\n\n'
        + "def setup(manager: sp.Manager) -> None:\n"
        + '    """Register every controller on ``manager``."""\n'
        + calls
    )


def _webhooks_init(
    project: Project,
    converting: list[ScaffoldedResource],
    admitting: list[ScaffoldedResource],
) -> str:
    imports: dict[str, list[str]] = {}
    calls: list[str] = []

    def need(module: str, name: str) -> None:
        imports.setdefault(module, []).append(name)

    for hub in converting:
        versions = [hub, *project.spokes_of(hub)]
        classes = []
        for version in versions:
            n = version.names
            cls = n.kind if version.is_hub else n.kind + n.version[0].upper() + n.version[1:]
            need(f"{project.package}.api.{n.group_module}.{n.version}.{n.module}", cls)
            classes.append(cls)
        calls.append(
            "    manager.webhook_server.add_conversion(\n"
            + "".join(f"        {c},\n" for c in classes)
            + "    )\n"
        )
    for hub in admitting:
        hooks: list[str] = []
        if hub.webhooks.defaulting:
            hooks.append(f"{hub.names.kind}Defaulter")
        if hub.webhooks.validation:
            hooks.append(f"{hub.names.kind}Validator")
        for hook in hooks:
            need(f"{project.package}.webhooks.{hub.names.module}", hook)
        calls.append(
            "    manager.webhook_server.add_admission(\n"
            + "".join(f"        {h}(),\n" for h in hooks)
            + "    )\n"
        )
    if not calls:
        calls = ["    del manager  # no webhooks yet: `setpoint create webhook` adds them\n"]
    import_block = "".join(
        _from_import(module, _isort_order(names)) + "\n"
        for module, names in sorted(imports.items())
    )
    return (
        '"""The operator\'s webhooks: conversion between versions, defaulting, validation.\n\n'
        "Written by setpoint from PROJECT (``setpoint create webhook`` adds them here): edit\n"
        'the webhook modules, not this file.\n"""\n\n'
        "from __future__ import annotations\n\n"
        "import setpoint as sp\n"
        + ("\n" + import_block if import_block else "")
        + '\n__all__ = ["setup"]\n\n\n'
        + "def setup(manager: sp.Manager) -> None:\n"
        + '    """Serve every webhook on ``manager``\'s webhook server."""\n'
        + "".join(calls)
    )


def _crd_kustomization(project: Project, hubs: list[ScaffoldedResource], webhooks: bool) -> str:
    document: dict[str, object] = {
        "resources": [f"bases/{r.names.full_group}_{r.names.plural}.yaml" for r in hubs],
        "configurations": ["kustomizeconfig.yaml"],
    }
    converting = [r for r in hubs if r.webhooks.conversion]
    if converting and webhooks:
        document["patches"] = [
            {"path": f"patches/cainjection_in_{r.names.plural}.yaml"} for r in converting
        ]
    return _yaml_with_header(
        "# bases/ is generated from the Python types (make manifests); one CRD per kind.",
        document,
    )


def _network_policy_kustomization(webhooks: bool) -> str:
    """Which ports of the manager's Pod are open to whom (config/network-policy)."""
    resources = ["allow-metrics-traffic.yaml"]
    if webhooks:
        resources.append("allow-webhook-traffic.yaml")
    header = textwrap.dedent(
        """\
        # Ingress to the manager's Pod: /metrics (8443) only from namespaces labelled
        # metrics=enabled, the webhook port (9443) once webhooks exist; nothing else but the
        # kubelet's probes. Enforced by CNIs that implement NetworkPolicy (Calico, Cilium, ...)."""
    )
    return _yaml_with_header(header, {"resources": resources})


def _default_kustomization(
    project: Project, admitting: list[ScaffoldedResource], webhooks: bool
) -> str:
    resources = ["../crd", "../rbac", "../manager", "metrics_service.yaml", "../network-policy"]
    patches: list[dict[str, object]] = []
    if webhooks:
        resources += ["../webhook", "../certmanager"]
        patches.append({"path": "manager_webhook_patch.yaml", "target": {"kind": "Deployment"}})
        if admitting:
            patches.append({"path": "webhookcainjection_patch.yaml"})
    document: dict[str, object] = {
        "namespace": f"{project.name}-system",
        "namePrefix": f"{project.name}-",
        "labels": [
            {"pairs": {"app.kubernetes.io/part-of": project.name}, "includeSelectors": False}
        ],
        "resources": resources,
    }
    if patches:
        document["patches"] = patches
    header = textwrap.dedent(
        f"""\
        # Everything the operator needs on a cluster: kubectl apply -k config/default
        # Objects land in namespace {project.name}-system with the name prefix {project.name}-.
        # /metrics is HTTPS for authorized scrapers only, from namespaces labelled
        # metrics=enabled (../network-policy); bind {project.name}-metrics-reader to the scraper.
        # Add ../prometheus to resources for a ServiceMonitor (Prometheus Operator)."""
    )
    return _yaml_with_header(header, document)


def _yaml(document: object) -> str:
    import yaml

    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _yaml_with_header(header: str, document: object) -> str:
    return header.rstrip("\n") + "\n" + _yaml(document)
