"""``setpoint generate helm``: a Helm chart of the operator, from the sources of ``config/``.

The chart holds what ``kubectl apply -k config/default`` installs, written from the same
places: the CRDs from the ``@sp.resource`` types (:func:`setpoint.crd.generate_crds`), the
manager's ClusterRole from ``@sp.rbac`` (:func:`setpoint.crd.generate_rbac`), the webhook
configurations from the declared validators and defaulters
(:func:`setpoint.crd.webhook_configurations`), and the hardened Deployment, Services and
roles of the scaffold's ``config/``. What kustomize's overlays choose, the chart's values
choose: the image, replicas, leader election, resources, log level, sharding, where the
webhook certificate comes from (the operator's own CA or cert-manager), the metrics Service
and the ServiceMonitor. Object names are ``namePrefix`` plus the kubebuilder name, as
``config/default`` makes them, so ``helm template`` and ``kubectl kustomize`` render the same
objects (docs/decisions/0037-helm-olm-installer.md).

CRDs go into ``crds/`` (Helm installs them once and never upgrades or deletes them: the
upgrade caveat of docs/guide/scaffolding.md) or, with ``crds="templates"``, into
``templates/crds.yaml``, upgraded with the release and kept on uninstall.

Regenerating keeps ``values.yaml``: every value the author set or added stays, new defaults
are added (:func:`merge_values`).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from setpoint.crd import (
    WebhookClientConfig,
    find_admission_webhooks,
    find_rbac_rules,
    find_resources,
    generate_crds,
    generate_rbac,
    import_targets,
    render_yaml,
    webhook_configurations,
)
from setpoint.crd.manifests import Manifest

__all__ = [
    "ChartOptions",
    "OperatorSources",
    "TextFile",
    "chart_files",
    "load_sources",
    "project_name",
    "register",
    "render_values",
    "values_spec",
    "write_chart",
]

_PREFIX = "__SP_PREFIX__"
"""Stands for the object name prefix in generated documents; becomes a template expression."""
_NAMESPACE = "__SP_NAMESPACE__"
"""Stands for the release namespace in generated documents."""


@dataclass(frozen=True)
class OperatorSources:
    """What the chart (and the OLM bundle) is made of: the operator's generated objects.

    Names inside are the kubebuilder ones, unprefixed (``manager-role``,
    ``webhook-service`` in namespace ``system``), exactly as ``setpoint generate`` writes
    them into ``config/``.
    """

    package: str
    """The module ``setpoint run`` starts (the container's command)."""
    crds: tuple[dict[str, Any], ...]
    """One CustomResourceDefinition per kind, as ``generate crd`` writes it."""
    rbac: tuple[dict[str, Any], ...]
    """The manager's ClusterRole (and Roles), as ``generate rbac`` writes them."""
    webhooks: tuple[dict[str, Any], ...]
    """The Mutating- and ValidatingWebhookConfiguration, as ``generate webhook`` writes them."""
    resources: tuple[type[Any], ...] = ()
    """The resource classes found (for descriptions and examples)."""

    @property
    def conversion_crds(self) -> tuple[str, ...]:
        """Names of the CRDs whose versions convert through the operator's webhook."""
        return tuple(
            crd["metadata"]["name"]
            for crd in self.crds
            if crd["spec"].get("conversion", {}).get("strategy") == "Webhook"
        )

    @property
    def serves_webhooks(self) -> bool:
        """Whether the operator serves any webhook (conversion or admission)."""
        return bool(self.webhooks or self.conversion_crds)


def load_sources(targets: Sequence[str], *, package: str | None = None) -> OperatorSources:
    """Import ``targets`` and generate the CRDs, RBAC and webhooks ``config/`` holds.

    ``package`` is the module ``setpoint run`` is given (default: the first target's
    top-level name, ``tenants`` for ``tenants`` or ``tenants/``).

    Raises:
        setpoint.crd.LoadError: a target cannot be imported.
        setpoint.crd.CRDGenerationError: a type makes no valid CRD.
        ValueError: no ``@sp.resource`` class was found.

    """
    modules = import_targets(targets)
    resources = find_resources(modules)
    if not resources:
        raise ValueError(
            f"no @sp.resource classes found in {', '.join(targets)}; pass the modules "
            "that define them"
        )
    crds = [m.documents[0] for m in generate_crds(resources, webhook=WebhookClientConfig())]
    rbac = generate_rbac(find_rbac_rules(modules)).documents
    hooks = [spec for spec in find_admission_webhooks(modules) if not spec.policy]
    configurations = webhook_configurations(hooks) if hooks else []
    if package is None:
        first = targets[0].rstrip("/")
        package = Path(first).stem if first.endswith(".py") else Path(first).name
        package = package.split(".")[0]
    return OperatorSources(
        package=package,
        crds=tuple(crds),
        rbac=tuple(rbac),
        webhooks=tuple(configurations),
        resources=tuple(resources),
    )


@dataclass(frozen=True)
class ChartOptions:
    """How the chart is named and where its CRDs go."""

    name: str
    """The project's name: the chart's name, the default name prefix (``NAME-``) and the
    namespace the kubebuilder layout installs into (``NAME-system``)."""
    version: str = "0.1.0"
    """The chart's version (SemVer)."""
    app_version: str = "0.1.0"
    """The operator's version, the image tag's default."""
    crds: Literal["dir", "templates"] = "dir"
    """``dir``: CRDs in ``crds/`` (installed once, never upgraded by Helm); ``templates``:
    in ``templates/crds.yaml``, upgraded with the release and kept on uninstall."""
    app_label: str | None = None
    """The ``app.kubernetes.io/name`` label's default (default: ``name``)."""
    description: str = ""
    """The chart's description (default: one naming the operator)."""
    icon: str | None = None
    """The URL of the chart's icon (``helm lint`` recommends one; default: none)."""


def _prefixed(document: dict[str, Any], *, namespaced: bool) -> dict[str, Any]:
    out = copy.deepcopy(document)
    meta = out.setdefault("metadata", {})
    meta["name"] = _PREFIX + meta["name"]
    if namespaced:
        meta["namespace"] = _NAMESPACE
    return out


def _service_refs(document: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Point webhook clientConfigs at the prefixed Service in ``namespace``."""
    out = copy.deepcopy(document)
    configs = [w.get("clientConfig", {}) for w in out.get("webhooks", ())]
    conversion = out.get("spec", {}).get("conversion", {}).get("webhook")
    if conversion:
        configs.append(conversion.get("clientConfig", {}))
    for config in configs:
        service = config.get("service")
        if service:
            service["name"] = _PREFIX + service["name"]
            service["namespace"] = namespace
    return out


def _template_text(documents: Sequence[Mapping[str, Any]]) -> str:
    text = render_yaml(documents)
    return text.replace(_PREFIX, '{{ include "operator.prefix" . }}').replace(
        _NAMESPACE, "{{ .Release.Namespace }}"
    )


def values_spec(sources: OperatorSources, options: ChartOptions) -> list[tuple[str, str, Any]]:
    """The generated values as (comment, key, default), in ``values.yaml``'s order."""
    name = options.name
    return [
        (
            "Prefix of every object's name (kustomize's namePrefix in config/default).",
            "namePrefix",
            f"{name}-",
        ),
        (
            "The app.kubernetes.io/name label: the Deployment's selector and the Services'.",
            "appName",
            options.app_label or name,
        ),
        (
            "The operator's image (`make docker-build`, `setpoint image build`).",
            "image",
            {"repository": name, "tag": "", "pullPolicy": "IfNotPresent"},
        ),
        ("Secrets to pull the image with.", "imagePullSecrets", []),
        (
            "Replicas of the manager. With leader election one runs the controllers and the "
            "others wait; with sharding each runs a share.",
            "replicas",
            1,
        ),
        (
            "Leader election (--leader-elect): keep it on whenever replicas can overlap "
            "(a rollout).",
            "leaderElection",
            {"enabled": True},
        ),
        ("Log level: debug, info, warning, error, critical.", "logLevel", "info"),
        ("Log format: json (for collectors) or console.", "logFormat", "json"),
        (
            "The manager container's resources.",
            "resources",
            {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "limits": {"cpu": "1", "memory": "512Mi"},
            },
        ),
        (
            "Sharding (ShardingOptions in the operator's setup, docs/guide/scale-out.md): "
            "enabled runs `replicas` replicas that each take a share, and gives each its pod "
            "name in POD_NAME (a unique shard_id).",
            "sharding",
            {"enabled": False},
        ),
        (
            "Webhooks (conversion, admission). certificates: self-managed (the operator "
            "keeps a CA and certificate in a Secret and injects the caBundles) or "
            "cert-manager (an Issuer and a Certificate; cert-manager must be installed).",
            "webhook",
            {"enabled": sources.serves_webhooks, "port": 9443, "certificates": "self-managed"},
        ),
        (
            "Metrics over HTTPS on :8443 for callers the API server authorizes; the "
            "ServiceMonitor needs the Prometheus Operator's CRDs.",
            "metrics",
            {"enabled": True, "port": 8443, "serviceMonitor": {"enabled": False}},
        ),
        (
            "CRDs rendered from templates/ (--crds templates): install them with the release.",
            "crds",
            {"install": True, "keep": True},
        ),
        ("Seconds the shutdown may take after SIGTERM.", "gracefulShutdownTimeout", 30),
        ("More arguments for `setpoint run`.", "extraArgs", []),
        ("More environment variables of the manager container.", "env", []),
        ("More volumes of the Pod, and where the manager mounts them.", "volumes", []),
        ("", "volumeMounts", []),
        (
            "The Pod's security context (the container's is fixed: no privilege escalation, "
            "read-only root, no capabilities).",
            "podSecurityContext",
            {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        ),
        ("The Deployment's strategy (empty: RollingUpdate).", "strategy", {}),
        ("Labels added to every object.", "commonLabels", {}),
        ("Node selection of the Pod.", "nodeSelector", {}),
        ("", "tolerations", []),
        ("", "affinity", {}),
        (
            "More objects to install with the release, as written (a PersistentVolumeClaim...).",
            "extraObjects",
            [],
        ),
    ]


def _deep_merge(defaults: Any, current: Any) -> Any:
    """``current`` over ``defaults``: mappings merge key by key, anything else is replaced."""
    if isinstance(defaults, dict) and isinstance(current, dict):
        merged = dict(defaults)
        for key, value in current.items():
            merged[key] = _deep_merge(defaults[key], value) if key in defaults else value
        return merged
    return copy.deepcopy(current)


def _dump(key: str, value: Any) -> str:
    return yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False)


def render_values(spec: Sequence[tuple[str, str, Any]], existing: str | None = None) -> str:
    """``values.yaml``: the generated defaults, with what ``existing`` set kept over them.

    A value the author changed keeps the author's value; a key the author added (at any
    depth) stays; a default the generator added since appears. The generated keys come
    first with their comments, the author's own top-level keys after them. Comments the
    author wrote are not kept (the values are).

    Raises:
        ValueError: ``existing`` is not a YAML mapping.

    """
    current: dict[str, Any] = {}
    if existing is not None and existing.strip():
        loaded = yaml.safe_load(existing)
        if not isinstance(loaded, dict):
            raise ValueError("values.yaml must be a YAML mapping; fix or remove it to regenerate")
        current = loaded
    parts = [
        "# Values of the chart `setpoint generate helm` wrote. Regenerating keeps every value\n"
        "# set here and every key added; comments outside the generated ones are not kept.\n"
    ]
    known = set()
    for comment, key, default in spec:
        known.add(key)
        value = _deep_merge(default, current[key]) if key in current else default
        if comment:
            parts.append("\n" + "".join(f"# {line}\n" for line in _wrap(comment)))
        parts.append(_dump(key, value))
    extra = [key for key in current if key not in known]
    if extra:
        parts.append("\n# Values added by the chart's author (kept on regeneration).\n")
        for key in extra:
            parts.append(_dump(key, current[key]))
    return "".join(parts)


def _wrap(text: str, width: int = 88) -> list[str]:
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


_HELPERS = """\
{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
{{- define "operator.prefix" -}}{{ .Values.namePrefix }}{{- end -}}

{{- define "operator.labels" -}}
app.kubernetes.io/name: {{ .Values.appName }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "operator.serviceAccount" -}}
{{ include "operator.prefix" . }}controller-manager
{{- end -}}

{{- define "operator.certSecret" -}}
{{ include "operator.prefix" . }}webhook-server-cert
{{- end -}}

{{- define "operator.certManager" -}}
{{ and .Values.webhook.enabled (eq .Values.webhook.certificates "cert-manager") }}
{{- end -}}

{{- define "operator.caFrom" -}}
{{ .Release.Namespace }}/{{ include "operator.prefix" . }}serving-cert
{{- end -}}

{{- define "operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
"""

_RBAC = """\
{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "operator.serviceAccount" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "operator.prefix" . }}manager-rolebinding
  labels:
    {{- include "operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "operator.prefix" . }}manager-role
subjects:
- kind: ServiceAccount
  name: {{ include "operator.serviceAccount" . }}
  namespace: {{ .Release.Namespace }}
{{- if .Values.leaderElection.enabled }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "operator.prefix" . }}leader-election-role
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
rules:
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - get
  - list
  - watch
  - create
  - update
  - patch
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "operator.prefix" . }}leader-election-rolebinding
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "operator.prefix" . }}leader-election-role
subjects:
- kind: ServiceAccount
  name: {{ include "operator.serviceAccount" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
{{- if and .Values.webhook.enabled (eq .Values.webhook.certificates "self-managed") }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "operator.prefix" . }}webhook-certificate-role
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
rules:
- apiGroups:
  - ""
  resources:
  - secrets
  verbs:
  - get
  - list
  - watch
  - create
  - update
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "operator.prefix" . }}webhook-certificate-rolebinding
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "operator.prefix" . }}webhook-certificate-role
subjects:
- kind: ServiceAccount
  name: {{ include "operator.serviceAccount" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}
{{- if .Values.metrics.enabled }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "operator.prefix" . }}metrics-auth-role
  labels:
    {{- include "operator.labels" . | nindent 4 }}
rules:
- apiGroups:
  - authentication.k8s.io
  resources:
  - tokenreviews
  verbs:
  - create
- apiGroups:
  - authorization.k8s.io
  resources:
  - subjectaccessreviews
  verbs:
  - create
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "operator.prefix" . }}metrics-auth-rolebinding
  labels:
    {{- include "operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "operator.prefix" . }}metrics-auth-role
subjects:
- kind: ServiceAccount
  name: {{ include "operator.serviceAccount" . }}
  namespace: {{ .Release.Namespace }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "operator.prefix" . }}metrics-reader
  labels:
    {{- include "operator.labels" . | nindent 4 }}
rules:
- nonResourceURLs:
  - /metrics
  verbs:
  - get
{{- end }}
"""

_DEPLOYMENT = """\
{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "operator.prefix" . }}controller-manager
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
spec:
  replicas: {{ .Values.replicas }}
  {{- with .Values.strategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .Values.appName }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {{ .Values.appName }}
    spec:
      serviceAccountName: {{ include "operator.serviceAccount" . }}
      terminationGracePeriodSeconds: {{ add .Values.gracefulShutdownTimeout 10 }}
      securityContext:
        {{- toYaml .Values.podSecurityContext | nindent 8 }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: manager
        image: {{ include "operator.image" . }}
        {{- with .Values.image.pullPolicy }}
        imagePullPolicy: {{ . }}
        {{- end }}
        command: ["setpoint", "run", "__SP_PACKAGE__"]
        args:
        {{- if .Values.leaderElection.enabled }}
        - --leader-elect
        {{- end }}
        {{- if .Values.metrics.enabled }}
        - --metrics-secure
        - --metrics-bind-address=:{{ .Values.metrics.port }}
        {{- else }}
        - --metrics-bind-address=0
        {{- end }}
        - --health-probe-bind-address=:8081
        - --graceful-shutdown-timeout={{ .Values.gracefulShutdownTimeout }}
        {{- if .Values.webhook.enabled }}
        - --webhook-bind-address=:{{ .Values.webhook.port }}
        {{- if eq .Values.webhook.certificates "cert-manager" }}
        - --webhook-cert-dir=/etc/webhook/certs
        {{- else }}
        - --webhook-cert-secret={{ include "operator.certSecret" . }}
        - --webhook-service={{ include "operator.prefix" . }}webhook-service
__SP_INJECT__
        {{- end }}
        {{- end }}
        {{- with .Values.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        env:
        - name: SETPOINT_LOG_FORMAT
          value: {{ .Values.logFormat | quote }}
        {{- if ne .Values.logLevel "info" }}
        - name: SETPOINT_LOG_LEVEL
          value: {{ .Values.logLevel | quote }}
        {{- end }}
        {{- if .Values.sharding.enabled }}
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        {{- end }}
        {{- with .Values.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        ports:
        {{- if .Values.metrics.enabled }}
        - name: metrics
          containerPort: {{ .Values.metrics.port }}
          protocol: TCP
        {{- end }}
        - name: probes
          containerPort: 8081
          protocol: TCP
        {{- if .Values.webhook.enabled }}
        - name: webhook-server
          containerPort: {{ .Values.webhook.port }}
          protocol: TCP
        {{- end }}
        livenessProbe:
          httpGet:
            path: /healthz
            port: probes
          initialDelaySeconds: 10
          periodSeconds: 20
        readinessProbe:
          httpGet:
            path: /readyz
            port: probes
          periodSeconds: 10
        resources:
          {{- toYaml .Values.resources | nindent 10 }}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities:
            drop: ["ALL"]
        volumeMounts:
        {{- if and .Values.webhook.enabled (eq .Values.webhook.certificates "cert-manager") }}
        - name: webhook-certs
          mountPath: /etc/webhook/certs
          readOnly: true
        {{- end }}
        {{- with .Values.volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      volumes:
      {{- if and .Values.webhook.enabled (eq .Values.webhook.certificates "cert-manager") }}
      - name: webhook-certs
        secret:
          secretName: {{ include "operator.certSecret" . }}
      {{- end }}
      {{- with .Values.volumes }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
"""

_WEBHOOK_SERVICE = """\
{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
{{- if .Values.webhook.enabled }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "operator.prefix" . }}webhook-service
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
spec:
  selector:
    app.kubernetes.io/name: {{ .Values.appName }}
  ports:
  - name: webhook
    port: 443
    protocol: TCP
    targetPort: webhook-server
{{- if eq .Values.webhook.certificates "cert-manager" }}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: {{ include "operator.prefix" . }}selfsigned-issuer
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ include "operator.prefix" . }}serving-cert
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
spec:
  dnsNames:
  - {{ include "operator.prefix" . }}webhook-service.{{ .Release.Namespace }}.svc
  - {{ include "operator.prefix" . }}webhook-service.{{ .Release.Namespace }}.svc.cluster.local
  issuerRef:
    kind: Issuer
    name: {{ include "operator.prefix" . }}selfsigned-issuer
  secretName: {{ include "operator.certSecret" . }}
{{- end }}
{{- end }}
"""

_METRICS = """\
{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
{{- if .Values.metrics.enabled }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "operator.prefix" . }}controller-manager-metrics-service
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
    control-plane: controller-manager
spec:
  selector:
    app.kubernetes.io/name: {{ .Values.appName }}
  ports:
  - name: https
    port: {{ .Values.metrics.port }}
    protocol: TCP
    targetPort: metrics
{{- if .Values.metrics.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "operator.prefix" . }}controller-manager-metrics-monitor
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "operator.labels" . | nindent 4 }}
spec:
  endpoints:
  - path: /metrics
    port: https
    scheme: https
    bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
    tlsConfig:
      # The metrics certificate is self-signed, made at start-up: nothing to verify it with.
      insecureSkipVerify: true
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .Values.appName }}
      control-plane: controller-manager
{{- end }}
{{- end }}
"""

_EXTRA = """\
{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
{{- range .Values.extraObjects }}
---
{{ tpl (toYaml .) $ }}
{{- end }}
"""

_NOTES = """\
{{ .Chart.Name }} is installed in namespace {{ .Release.Namespace }}: the Deployment
{{ include "operator.prefix" . }}controller-manager runs `setpoint run __SP_PACKAGE__`.

  kubectl -n {{ .Release.Namespace }} rollout status \
    deploy/{{ include "operator.prefix" . }}controller-manager
"""


def _labelled(text: str) -> str:
    """Add the chart's labels to generated documents (after each ``metadata:`` line)."""
    out = []
    for line in text.splitlines(keepends=True):
        out.append(line)
        if line == "metadata:\n":
            out.append('  labels:\n    {{- include "operator.labels" . | nindent 4 }}\n')
    return "".join(out)


def _crd_documents(sources: OperatorSources, options: ChartOptions) -> list[dict[str, Any]]:
    namespace = _NAMESPACE if options.crds == "templates" else f"{options.name}-system"
    prefix_value = f"{options.name}-"
    documents = []
    for crd in sources.crds:
        document = _service_refs(crd, namespace)
        if options.crds == "dir":
            # crds/ is not templated: the Service is the one of the default prefix and
            # namespace (install with -n NAME-system and the default namePrefix).
            document = _replace_prefix(document, prefix_value)
        documents.append(document)
    return documents


def _replace_prefix(document: dict[str, Any], prefix: str) -> dict[str, Any]:
    text = yaml.safe_dump(document)
    loaded: dict[str, Any] = yaml.safe_load(text.replace(_PREFIX, prefix))
    return loaded


def chart_files(sources: OperatorSources, options: ChartOptions) -> dict[str, str]:
    """Every file of the chart but ``values.yaml`` (path under the chart -> text).

    Its named templates are ``<name>.prefix`` (the object name prefix, for ``tpl`` in
    ``extraObjects``), ``<name>.labels``, ``<name>.serviceAccount`` and so on.

    ``values.yaml`` comes from :func:`render_values` over :func:`values_spec`, merged with
    the one on disk (:func:`write_chart` does both).
    """
    package = sources.package
    inject = []
    for name in sources.conversion_crds:
        inject.append(f"        - --webhook-inject=crd/{name}")
    for configuration in sources.webhooks:
        kind = "mutating" if configuration["kind"].startswith("Mutating") else "validating"
        inject.append(
            f"        - --webhook-inject={kind}/"
            f'{{{{ include "operator.prefix" . }}}}{configuration["metadata"]["name"]}'
        )
    deployment = _DEPLOYMENT.replace("__SP_PACKAGE__", package).replace(
        "__SP_INJECT__\n", "".join(line + "\n" for line in inject)
    )
    header = "{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}\n"
    role = _template_text(
        [_prefixed(d, namespaced=d["kind"] == "Role") for d in sources.rbac]
    ).removeprefix("---\n")
    files = {
        "Chart.yaml": yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": options.name,
                "description": options.description
                or f"The {options.name} operator (a setpoint operator; `setpoint run {package}`).",
                "type": "application",
                "version": options.version,
                "appVersion": options.app_version,
                **({"icon": options.icon} if options.icon else {}),
            },
            sort_keys=False,
        ),
        ".helmignore": ".git/\n*.swp\n*.bak\n*.tmp\n*.orig\n",
        "templates/_helpers.tpl": _HELPERS,
        "templates/rbac.yaml": _RBAC,
        "templates/manager-role.yaml": header + _labelled(role),
        "templates/deployment.yaml": deployment,
        "templates/webhook-service.yaml": _WEBHOOK_SERVICE,
        "templates/metrics.yaml": _METRICS,
        "templates/extra-objects.yaml": _EXTRA,
        "templates/NOTES.txt": _NOTES.replace("__SP_PACKAGE__", package),
    }
    if sources.webhooks:
        configurations = [
            _service_refs(_prefixed(d, namespaced=False), _NAMESPACE) for d in sources.webhooks
        ]
        text = _labelled(_template_text(configurations).removeprefix("---\n"))
        text = re.sub(
            r"(?m)^  labels:\n",
            '  {{- if eq .Values.webhook.certificates "cert-manager" }}\n'
            "  annotations:\n"
            '    cert-manager.io/inject-ca-from: {{ include "operator.caFrom" . }}\n'
            "  {{- end }}\n"
            "  labels:\n",
            text,
        )
        files["templates/webhook-configurations.yaml"] = (
            header + "{{- if .Values.webhook.enabled }}\n" + text + "{{- end }}\n"
        )
    crds = _crd_documents(sources, options)
    if options.crds == "dir":
        for crd in crds:
            files[f"crds/{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"] = (
                render_yaml([crd])
            )
    else:
        text = _template_text(crds).removeprefix("---\n")
        text = re.sub(
            r"(?m)^metadata:\n",
            "metadata:\n"
            '  {{- if or .Values.crds.keep (eq .Values.webhook.certificates "cert-manager") }}\n'
            "  annotations:\n"
            "    {{- if .Values.crds.keep }}\n"
            "    helm.sh/resource-policy: keep\n"
            "    {{- end }}\n"
            '    {{- if eq (include "operator.certManager" .) "true" }}\n'
            '    cert-manager.io/inject-ca-from: {{ include "operator.caFrom" . }}\n'
            "    {{- end }}\n"
            "  {{- end }}\n",
            text,
        )
        files["templates/crds.yaml"] = (
            header + "{{- if .Values.crds.install }}\n" + text + "{{- end }}\n"
        )
    # Named templates are global across a chart and its subcharts: each chart names its own
    # after itself, so two operators' charts can sit in one umbrella chart.
    return {path: text.replace('"operator.', f'"{options.name}.') for path, text in files.items()}


def write_chart(
    sources: OperatorSources, options: ChartOptions, output_dir: Path, *, check: bool = False
) -> list[tuple[Path, str]]:
    """Write the chart under ``output_dir``; return (file, status) per file.

    Status is ``created``, ``updated`` or ``unchanged``; ``check=True`` writes nothing.
    ``values.yaml`` is merged with the one there (:func:`render_values`). Files the chart
    used to have and no longer has (a CRD moved to ``templates/``) are left in place.
    """
    from setpoint.crd import write_manifests

    files = chart_files(sources, options)
    values_path = output_dir / "values.yaml"
    existing = values_path.read_text(encoding="utf-8") if values_path.exists() else None
    files["values.yaml"] = render_values(values_spec(sources, options), existing)
    results = write_manifests(
        [TextFile(path, (), text) for path, text in sorted(files.items())],
        output_dir,
        check=check,
    )
    return [(result.path, result.status) for result in results]


@dataclass(frozen=True)
class TextFile(Manifest):
    """A generated file whose text is given (a template, not YAML documents)."""

    text: str = ""

    def render(self) -> str:
        """The file's text, as given."""
        return self.text


def project_name(args_name: str | None, package: str) -> str:
    """``--name``, else the ``PROJECT`` file's name (a scaffolded project), else the package."""
    if args_name:
        return args_name
    project = Path("PROJECT")
    if project.exists():
        loaded = yaml.safe_load(project.read_text(encoding="utf-8"))
        if isinstance(loaded, dict) and isinstance(loaded.get("projectName"), str):
            return str(loaded["projectName"])
    return package.replace("_", "-")


def _cmd_helm(args: argparse.Namespace) -> int:
    from setpoint.crd import CRDGenerationError, LoadError

    try:
        sources = load_sources(args.targets, package=args.package)
        options = ChartOptions(
            name=project_name(args.name, sources.package),
            version=args.chart_version,
            app_version=args.app_version,
            crds=args.crds,
            icon=args.icon,
        )
        results = write_chart(sources, options, args.output_dir, check=args.check)
    except (LoadError, CRDGenerationError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    stale = 0
    for path, status in results:
        verdict = status
        if args.check:
            stale += status != "unchanged"
            verdict = "up to date" if status == "unchanged" else "OUT OF DATE"
        print(f"{verdict:<12} {path}")
    if stale:
        print(
            f"setpoint: {stale} chart file(s) are out of date; run the same command without "
            "--check and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``generate helm`` to the ``generate`` subcommands."""
    helm = sub.add_parser(
        "helm",
        help="write a Helm chart of the operator (CRDs, RBAC, Deployment, webhooks, metrics)",
        description="Generate a Helm chart from the operator's types, @sp.rbac rules and "
        "webhooks, with the Deployment, Services and roles of the kubebuilder config/. "
        "Regenerating keeps the values set in values.yaml.",
    )
    helm.add_argument(
        "targets",
        nargs="+",
        metavar="MODULE_OR_PATH",
        help="importable module/package names, .py files or directories to scan",
    )
    helm.add_argument(
        "--output-dir",
        type=Path,
        default=Path("chart"),
        help="the chart's directory (default: chart)",
    )
    helm.add_argument(
        "--name",
        default=None,
        help="the project's name: chart name, name prefix NAME- and namespace NAME-system "
        "(default: PROJECT's name, else the package's)",
    )
    helm.add_argument(
        "--package",
        default=None,
        help="the module `setpoint run` starts (default: the first target's top-level name)",
    )
    helm.add_argument("--chart-version", default="0.1.0", help="Chart.yaml version")
    helm.add_argument(
        "--app-version", default="0.1.0", help="Chart.yaml appVersion (the image tag default)"
    )
    helm.add_argument("--icon", default=None, metavar="URL", help="Chart.yaml icon")
    helm.add_argument(
        "--crds",
        choices=("dir", "templates"),
        default="dir",
        help="dir (default): CRDs in crds/, installed once and never upgraded by Helm; "
        "templates: in templates/crds.yaml, upgraded with the release, kept on uninstall",
    )
    helm.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if any chart file is missing or out of date",
    )
    helm.set_defaults(func=_cmd_helm)
