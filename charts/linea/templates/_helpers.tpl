{{/* Chart name, overridable. */}}
{{- define "linea.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Base name of the release's objects: fullnameOverride, else the release name (with the
chart name appended unless already in it). Truncated so that "-operator" still fits in 63.
*/}}
{{- define "linea.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of the operator's Deployment, ClusterRole, ClusterRoleBinding, Service. */}}
{{- define "linea.operatorName" -}}
{{- printf "%s-operator" (include "linea.fullname" .) }}
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "linea.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "linea.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret with the operator key (LINEA_OPERATOR_KEY). */}}
{{- define "linea.keySecretName" -}}
{{- .Values.operator.keySecret.existingSecret | default (printf "%s-key" (include "linea.operatorName" .)) }}
{{- end }}

{{/* The operator image; also the default image of job pods. */}}
{{- define "linea.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Selector labels of the operator pod (also used by the NetworkPolicies). */}}
{{- define "linea.selectorLabels" -}}
app.kubernetes.io/name: {{ include "linea.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every object of the chart. */}}
{{- define "linea.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "linea.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: linea
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Label that the operator puts on every pod of a TrainingJob (master and workers). The
NetworkPolicy for job pods selects on it; the operator pod must never carry it.
*/}}
{{- define "linea.jobPodLabel" -}}
app.kubernetes.io/managed-by: linea-operator
{{- end }}

{{/*
Port of a job master's own Prometheus /metrics (plain HTTP, progress only). The operator
sets it (operator/src/desired.rs MASTER_METRICS_PORT; a unit test there checks that the two
agree): `linea master --metrics-listen 0.0.0.0:<port>`, containerPort `metrics`.
*/}}
{{- define "linea.masterMetricsPort" -}}
9090
{{- end }}
