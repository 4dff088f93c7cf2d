{{/* Written by `setpoint generate helm`: regenerating replaces this file. */}}
{{- define "tenants.prefix" -}}{{ .Values.namePrefix }}{{- end -}}

{{- define "tenants.labels" -}}
app.kubernetes.io/name: {{ .Values.appName }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tenants.serviceAccount" -}}
{{ include "tenants.prefix" . }}controller-manager
{{- end -}}

{{- define "tenants.certSecret" -}}
{{ include "tenants.prefix" . }}webhook-server-cert
{{- end -}}

{{- define "tenants.certManager" -}}
{{ and .Values.webhook.enabled (eq .Values.webhook.certificates "cert-manager") }}
{{- end -}}

{{- define "tenants.caFrom" -}}
{{ .Release.Namespace }}/{{ include "tenants.prefix" . }}serving-cert
{{- end -}}

{{- define "tenants.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
