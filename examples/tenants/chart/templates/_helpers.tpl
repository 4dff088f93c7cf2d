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
