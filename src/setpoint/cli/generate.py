"""``setpoint generate crd|rbac|webhook|dashboard``: manifests and monitoring for the operator.

The first three import the given modules (names, files or directories), find
what was declared there and write kubebuilder-compatible files under
``--output-dir`` (default ``config``):

* ``generate crd``  -> ``config/crd/bases/<group>_<plural>.yaml``, one per kind;
* ``generate rbac`` -> ``config/rbac/role.yaml``;
* ``generate webhook`` -> ``config/webhook/manifests.yaml`` (and ``policies.yaml`` for
  validators declared as CEL), the Validating- and
  MutatingWebhookConfiguration for the declared ``sp.CustomValidator`` and
  ``sp.CustomDefaulter`` classes;
* ``generate dashboard`` -> ``config/grafana/setpoint-runtime.json`` (a Grafana dashboard of
  the runtime metrics), ``config/prometheus/monitor.yaml`` (a ServiceMonitor that scrapes
  secure metrics as ``setpoint init``'s file at that path does) and
  ``config/prometheus/alerts.yaml`` (a PrometheusRule); it imports nothing of the operator.
* ``generate gitops`` -> ``config/gitops/argocd-cm.yaml`` (Argo CD health checks of the
  declared kinds and ``ignoreDifferences`` for what setpoint writes) and
  ``config/gitops/flux-kustomization.yaml`` (:mod:`setpoint.cli.gitops`);
* ``generate sharding-policy`` -> ``config/sharding/policy.yaml``: the
  ValidatingAdmissionPolicy and binding that let only the operator change a sharding ring's
  labels and hand-over records (:mod:`setpoint.manager.shardpolicy`); it imports nothing of
  the operator.

Output is deterministic and unchanged files are not rewritten. ``--check``
writes nothing and exits 1 when a file is out of date, for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from setpoint.crd import (
    DEFAULT_ROLE_NAME,
    CRDGenerationError,
    LoadError,
    Manifest,
    WebhookClientConfig,
    find_admission_webhooks,
    find_rbac_rules,
    find_resources,
    generate_crds,
    generate_rbac,
    generate_webhooks,
    import_targets,
    write_manifests,
)
from setpoint.crd.webhooks import generate_policies

__all__ = ["register"]


class _JSONManifest(Manifest):
    """A generated file written as JSON (the Grafana dashboard) instead of YAML."""

    def render(self) -> str:
        """The file's text: its one document as indented JSON with sorted keys."""
        return json.dumps(self.documents[0], indent=2, sort_keys=True) + "\n"


def _write(manifests: Sequence[Manifest], args: argparse.Namespace) -> int:
    results = write_manifests(manifests, args.output_dir, check=args.check)
    stale = [r for r in results if r.status != "unchanged"]
    for result in results:
        if args.check:
            verdict = "up to date" if result.status == "unchanged" else "OUT OF DATE"
        else:
            verdict = result.status
        print(f"{verdict:<12} {result.path}")
    if args.check and stale:
        print(
            f"setpoint: {len(stale)} generated file(s) are out of date; run the same command "
            "without --check and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


def _client_config(args: argparse.Namespace) -> WebhookClientConfig | None:
    """The clientConfig from --webhook-url/--webhook-ca-file (None: the in-cluster Service)."""
    if args.webhook_url is not None:
        ca_bundle = args.webhook_ca_file.read_bytes() if args.webhook_ca_file else None
        return WebhookClientConfig(url=args.webhook_url, ca_bundle=ca_bundle)
    if args.webhook_ca_file is not None:
        raise ValueError("--webhook-ca-file goes with --webhook-url")
    return None


def _cmd_crd(args: argparse.Namespace) -> int:
    try:
        modules = import_targets(args.targets)
        resources = find_resources(modules)
        if not resources:
            print(
                "setpoint: error: no @sp.resource classes found in "
                f"{', '.join(args.targets)}; pass the modules that define them",
                file=sys.stderr,
            )
            return 1
        manifests = generate_crds(resources, webhook=_client_config(args))
    except (LoadError, CRDGenerationError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    from setpoint.crd.runtime_fields import runtime_field_warnings

    for runtime in runtime_field_warnings(m.documents[0] for m in manifests):
        print(f"setpoint: warning: {runtime}", file=sys.stderr)
    if args.against_cluster:
        for warning in asyncio.run(_stored_version_warnings(manifests, args)):
            print(f"setpoint: warning: {warning}", file=sys.stderr)
    return _write(manifests, args)


async def _stored_version_warnings(
    manifests: Sequence[Manifest], args: argparse.Namespace
) -> list[str]:
    """For each generated CRD, whether applying it would drop a version still stored."""
    from setpoint.api import kinds
    from setpoint.client import Client
    from setpoint.client.errors import NotFound
    from setpoint.migrate.install import dropped_stored_versions, stored_version_message

    warnings = []
    async with Client.from_kubeconfig(args.kubeconfig, context=args.context) as client:
        for manifest in manifests:
            crd = manifest.documents[0]
            name = crd["metadata"]["name"]
            try:
                live = await client.get(kinds.CustomResourceDefinition, name)
            except NotFound:
                continue
            dropped = dropped_stored_versions(live, crd)
            if dropped:
                warnings.append(
                    stored_version_message(name, dropped) + "; the API server would refuse it"
                )
    return warnings


def _cmd_webhook(args: argparse.Namespace) -> int:
    try:
        modules = import_targets(args.targets)
        webhooks = find_admission_webhooks(modules)
        if not webhooks:
            print(
                "setpoint: error: no sp.CustomValidator or sp.CustomDefaulter classes found in "
                f"{', '.join(args.targets)}; pass the modules that define them",
                file=sys.stderr,
            )
            return 1
        manifests: list[Manifest] = []
        if any(not spec.policy for spec in webhooks):
            manifests.append(generate_webhooks(webhooks, client_config=_client_config(args)))
        policies = generate_policies(webhooks)
        if policies is not None:
            manifests.append(policies)
    except (LoadError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    return _write(manifests, args)


def _cmd_rbac(args: argparse.Namespace) -> int:
    try:
        modules = import_targets(args.targets)
        manifest = generate_rbac(
            find_rbac_rules(modules), role_name=args.role_name, namespace=args.namespace
        )
    except (LoadError, ValueError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    return _write([manifest], args)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from setpoint.observability.dashboards import (
        DashboardOptions,
        alerting_rules,
        grafana_dashboard,
        service_monitor,
    )

    try:
        options = DashboardOptions(
            namespace=args.namespace,
            metrics_port=args.metrics_port,
            metrics_scheme=args.metrics_scheme,
            metrics_ca_secret=args.metrics_ca_secret,
            metrics_server_name=args.metrics_server_name,
            finalizer_pending_seconds=args.finalizer_pending_seconds,
            loop_lag_seconds=args.loop_lag_seconds,
        )
    except ValueError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    manifests = [
        _JSONManifest("grafana/setpoint-runtime.json", (grafana_dashboard(),)),
        Manifest("prometheus/monitor.yaml", (service_monitor(options),)),
        Manifest("prometheus/alerts.yaml", (alerting_rules(options),)),
    ]
    return _write(manifests, args)


def _cmd_gitops(args: argparse.Namespace) -> int:
    from setpoint.cli.gitops import gitops_manifests

    try:
        resources = find_resources(import_targets(args.targets))
    except LoadError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    if not resources:
        print(
            "setpoint: error: no @sp.resource classes found in "
            f"{', '.join(args.targets)}; pass the modules that define them",
            file=sys.stderr,
        )
        return 1
    return _write(
        gitops_manifests(
            resources,
            argocd_namespace=args.argocd_namespace,
            flux_name=args.flux_name,
            flux_path=args.flux_path,
            flux_source=args.flux_source,
            flux_namespace=args.flux_namespace,
        ),
        args,
    )


def _cmd_sharding_policy(args: argparse.Namespace) -> int:
    from setpoint.manager.shardpolicy import (
        ShardedResource,
        service_account_username,
        sharding_policy,
    )

    try:
        resources = [ShardedResource.parse(text) for text in args.resource]
        operator = list(args.user)
        for text in args.service_account:
            namespace, sep, name = text.partition(":")
            if not sep or not namespace or not name:
                raise ValueError(
                    f"--service-account {text!r} must be NAMESPACE:NAME, e.g. "
                    "widgets-system:widgets-controller-manager"
                )
            operator.append(service_account_username(namespace, name))
        documents = sharding_policy(args.ring, resources, operator=operator)
    except ValueError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    return _write([Manifest("sharding/policy.yaml", documents)], args)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``generate``: crd, rbac, webhook, dashboard, gitops and sharding-policy.

    Each subcommand sets ``func``; ``main`` calls ``args.func(args)`` for the exit code.
    """
    parser = subparsers.add_parser(
        "generate",
        help="generate CRD, RBAC and webhook manifests from Python types, and dashboards",
        description="Generate kubebuilder-compatible manifests from the operator's code.",
    )
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")

    def common(command: argparse.ArgumentParser, *, targets: bool = True) -> None:
        if targets:
            command.add_argument(
                "targets",
                nargs="+",
                metavar="MODULE_OR_PATH",
                help="importable module/package names, .py files or directories to scan",
            )
        command.add_argument(
            "--output-dir",
            type=Path,
            default=Path("config"),
            help="root of the kubebuilder config tree (default: config)",
        )
        command.add_argument(
            "--check",
            action="store_true",
            help="write nothing; exit 1 if any generated file is missing or out of date",
        )

    crd = sub.add_parser(
        "crd",
        help="write config/crd/bases/<group>_<plural>.yaml for every declared resource kind",
        description="Generate one CustomResourceDefinition per kind declared with @sp.resource.",
    )
    common(crd)
    crd.add_argument(
        "--webhook-url",
        metavar="URL",
        default=None,
        help="for kinds with converters: the conversion webhook's https:// URL, for an "
        "operator running outside the cluster (default: the kubebuilder layout's Service "
        "webhook-service in namespace system, path /convert)",
    )
    crd.add_argument(
        "--webhook-ca-file",
        metavar="PEM",
        type=Path,
        default=None,
        help="with --webhook-url: the CA certificate the API server trusts for the webhook "
        "(written as caBundle)",
    )
    crd.add_argument(
        "--against-cluster",
        action="store_true",
        help="warn when a generated CRD drops a version the live cluster still lists in "
        "status.storedVersions (run `setpoint crd migrate-storage` first)",
    )
    crd.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG)")
    crd.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    crd.set_defaults(func=_cmd_crd)

    rbac = sub.add_parser(
        "rbac",
        help="write config/rbac/role.yaml from the rules declared with @sp.rbac",
        description="Generate the manager ClusterRole (and Roles) from @sp.rbac declarations.",
    )
    common(rbac)
    rbac.add_argument(
        "--role-name",
        default=DEFAULT_ROLE_NAME,
        help=f"name of the generated (Cluster)Role (default: {DEFAULT_ROLE_NAME})",
    )
    rbac.add_argument(
        "--namespace",
        default=None,
        help="generate a Role in this namespace instead of a ClusterRole "
        "(for operators that watch a single namespace)",
    )
    rbac.set_defaults(func=_cmd_rbac)

    webhook = sub.add_parser(
        "webhook",
        help="write config/webhook/manifests.yaml for the declared validators and defaulters "
        "(and webhook/policies.yaml for validators declared as CEL validations)",
        description="Generate the ValidatingWebhookConfiguration and "
        "MutatingWebhookConfiguration for every sp.CustomValidator and sp.CustomDefaulter, "
        "of any kind; a validator declared as CEL validations becomes a "
        "ValidatingAdmissionPolicy and binding in webhook/policies.yaml instead.",
    )
    common(webhook)
    webhook.add_argument(
        "--webhook-url",
        metavar="URL",
        default=None,
        help="the webhook server's https://host:port, for an operator running outside the "
        "cluster; each webhook's path is appended (default: the kubebuilder layout's Service "
        "webhook-service in namespace system, port 443)",
    )
    webhook.add_argument(
        "--webhook-ca-file",
        metavar="PEM",
        type=Path,
        default=None,
        help="with --webhook-url: the CA certificate the API server trusts for the webhook "
        "(written as caBundle)",
    )
    webhook.set_defaults(func=_cmd_webhook)

    dashboard = sub.add_parser(
        "dashboard",
        help="write a Grafana dashboard, a ServiceMonitor and alerting rules for the "
        "runtime metrics",
        description="Generate config/grafana/setpoint-runtime.json, "
        "config/prometheus/monitor.yaml (ServiceMonitor) and config/prometheus/alerts.yaml "
        "(PrometheusRule: finalizer pending too long, reconcile errors, no leader, loop lag).",
    )
    common(dashboard, targets=False)
    dashboard.add_argument(
        "--namespace",
        default="system",
        help="namespace of the ServiceMonitor and PrometheusRule (default: system)",
    )
    dashboard.add_argument(
        "--metrics-port",
        default="https",
        help="name of the metrics Service's port to scrape (default: https, the scaffold's)",
    )
    dashboard.add_argument(
        "--metrics-scheme",
        choices=("http", "https"),
        default="https",
        help="https (default): the endpoint of `setpoint run --metrics-secure`, scraped with "
        "Prometheus' service account token; http: an unauthenticated endpoint on a trusted "
        "network, scraped without a token",
    )
    dashboard.add_argument(
        "--metrics-ca-secret",
        default=None,
        metavar="SECRET",
        help="verify the metrics certificate (served with `setpoint run --metrics-cert-dir`) "
        "with ca.crt of this Secret in --namespace, e.g. cert-manager's; needs "
        "--metrics-server-name (default: skip verification, for the self-signed certificate)",
    )
    dashboard.add_argument(
        "--metrics-server-name",
        default=None,
        metavar="DNS_NAME",
        help="with --metrics-ca-secret: the name the certificate is issued for, the metrics "
        "Service's DNS name (<prefix>controller-manager-metrics-service.<namespace>.svc)",
    )
    dashboard.add_argument(
        "--finalizer-pending-seconds",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="alert when an object waits longer than this for a finalizer (default: 600)",
    )
    dashboard.add_argument(
        "--loop-lag-seconds",
        type=float,
        default=0.1,
        metavar="SECONDS",
        help="alert when the event loop's p99 lag is above this (default: 0.1)",
    )
    dashboard.set_defaults(func=_cmd_dashboard)

    gitops = sub.add_parser(
        "gitops",
        help="write config/gitops/: Argo CD health checks and ignoreDifferences (argocd-cm), "
        "and a Flux Kustomization that waits for the objects",
        description="Generate what Argo CD and Flux need to read the health of the declared "
        "kinds (their controllers' kstatus conditions) without false drift: "
        "config/gitops/argocd-cm.yaml (resource.customizations.health.<group>_<Kind> Lua "
        "checks, ignoreDifferences for injected caBundles and setpoint.dev/applied-* "
        "annotations) and config/gitops/flux-kustomization.yaml (wait: true; Flux reads "
        "kstatus itself).",
    )
    common(gitops)
    gitops.add_argument(
        "--argocd-namespace", default="argocd", help="namespace of argocd-cm (default: argocd)"
    )
    gitops.add_argument("--flux-name", default="operator-objects", help="the Kustomization's name")
    gitops.add_argument(
        "--flux-path",
        default="./config/samples",
        help="the path in the Git source the Kustomization applies (default: ./config/samples)",
    )
    gitops.add_argument(
        "--flux-source",
        default="flux-system",
        help="the GitRepository's name (default: flux-system)",
    )
    gitops.add_argument(
        "--flux-namespace",
        default="flux-system",
        help="the Kustomization's namespace (default: flux-system)",
    )
    gitops.set_defaults(func=_cmd_gitops)

    policy = sub.add_parser(
        "sharding-policy",
        help="write config/sharding/policy.yaml: an admission policy letting only the "
        "operator change a sharding ring's labels and hand-over records",
        description="Generate a ValidatingAdmissionPolicy and its binding (Kubernetes 1.30+) "
        "that refuse changes of the shard label, the drain label and the hand-over annotation "
        "of a ring (decision 0011) by anyone but the operator's identities.",
    )
    common(policy, targets=False)
    policy.add_argument("--ring", required=True, help="the ring's name (ShardingOptions.ring)")
    policy.add_argument(
        "--resource",
        action="append",
        required=True,
        metavar="PLURAL.GROUP",
        help="a sharded resource, e.g. widgets.example.com (repeat for each sharded kind)",
    )
    policy.add_argument(
        "--service-account",
        action="append",
        default=[],
        metavar="NAMESPACE:NAME",
        help="the operator's ServiceAccount, as deployed (after kustomize's namespace and "
        "namePrefix)",
    )
    policy.add_argument(
        "--user",
        action="append",
        default=[],
        metavar="USERNAME",
        help="another identity allowed to change them (an operator run outside the cluster)",
    )
    policy.set_defaults(func=_cmd_sharding_policy)

    from setpoint.cli import bundle, helm, installer

    for shipping in (helm, bundle, installer):
        shipping.register(sub)
