{{/* Names and labels of every object, the ServiceAccount's name, and how a value is printed as written. Every define
is namespaced "trtwarm." (defines are global across subcharts). */}}

{{- define "trtwarm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trtwarm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The full name shortened to fit `max` characters with "-<suffix>" appended (dict "ctx" . "suffix" "gc" "max"
52). CronJob names are limited to 52 (the Job name adds 11), StatefulSet names to 52 (the controller-revision-hash
label), Service names to 63. */}}
{{- define "trtwarm.nameWithSuffix" -}}
{{- $base := include "trtwarm.fullname" .ctx }}
{{- if .suffix }}
{{- printf "%s-%s" ($base | trunc (int (sub .max (add1 (len .suffix)))) | trimSuffix "-") .suffix }}
{{- else }}
{{- $base | trunc (int .max) | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "trtwarm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trtwarm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trtwarm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trtwarm.labels" -}}
helm.sh/chart: {{ include "trtwarm.chart" . }}
{{ include "trtwarm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Whether the chart creates the ServiceAccount: asked for, or needed for Events. */}}
{{- define "trtwarm.createServiceAccount" -}}
{{- if or (.Values.serviceAccount | default dict).create .Values.rbac.events }}true{{ end }}
{{- end }}

{{- define "trtwarm.serviceAccountName" -}}
{{- if include "trtwarm.createServiceAccount" . }}{{ default (include "trtwarm.fullname" .) .Values.serviceAccount.name }}
{{- else }}{{ .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{/* Labels of the chart's Job Pods (gc, prebuild, helm test): their own `app.kubernetes.io/name`, so the
workload's selector, the PodMonitor, the PDB and the Services never select them. (dict "ctx" . "component" "gc") */}}
{{- define "trtwarm.componentLabels" -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "trtwarm.name" .ctx) .component | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: {{ include "trtwarm.name" .ctx }}
{{- end }}

{{/* A value as written in values.yaml: YAML reads 20250101 as a float, which `%v` prints as 2.0250101e+07. */}}
{{- define "trtwarm.scalar" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}{{ int64 . }}{{ else }}{{ toString . }}{{ end }}
{{- end }}
