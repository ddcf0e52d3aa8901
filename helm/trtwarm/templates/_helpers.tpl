{{/* Names and labels. Every define is namespaced "trtwarm." (defines are global across subcharts). */}}

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

{{- define "trtwarm.serviceAccountName" -}}
{{- if .Values.rbac.events }}{{ include "trtwarm.fullname" . }}{{ else }}{{ .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{- define "trtwarm.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{- define "trtwarm.cacheClaim" -}}
{{- default (printf "%s-cache" (include "trtwarm.fullname" .)) .Values.cache.pvc.existingClaim }}
{{- end }}

{{/* The downward-API identity trtwarm names builders and leases with, and records Events against. */}}
{{- define "trtwarm.podEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_UID
  valueFrom: {fieldRef: {fieldPath: metadata.uid}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
- name: HOME
  value: /tmp
{{- end }}

{{/* `trtwarm init` arguments from .Values.engine. */}}
{{- define "trtwarm.initArgs" -}}
{{- $e := .Values.engine -}}
- --model={{ $e.model.path }}
- --cache-dir={{ .Values.cache.mountPath }}
- --handoff-dir={{ .Values.handoff.mountPath }}
- --builder={{ $e.builder }}
{{- with $e.precision }}
- --precision={{ . }}
{{- end }}
{{- range $input, $dims := $e.shapes }}
- --shape={{ $input }}={{ $dims }}
{{- end }}
{{- if and $e.shapes $e.profiles }}
{{- fail "engine.shapes and engine.profiles do not mix: give every profile in engine.profiles" }}
{{- end }}
{{- range $e.profiles }}
- --profile={{ . }}
{{- end }}
{{- with $e.name }}
- --name={{ . }}
{{- end }}
{{- range $k, $v := $e.keyExtra }}
- --key-extra={{ $k }}={{ $v }}
{{- end }}
{{- if eq $e.builder "tensorrt" }}
{{- with $e.tensorrt.workspace }}
- --workspace={{ . }}
{{- end }}
{{- if ne (toString $e.tensorrt.optLevel) "" }}
- --opt-level={{ $e.tensorrt.optLevel }}
{{- end }}
- --hardware-compat={{ $e.tensorrt.hardwareCompat }}
- --tf32={{ $e.tensorrt.tf32 }}
{{- if $e.tensorrt.versionCompatible }}
- --version-compatible
{{- end }}
{{- if $e.tensorrt.excludeLeanRuntime }}
- --exclude-lean-runtime
{{- end }}
{{- range $e.tensorrt.plugins }}
- --plugin={{ . }}
{{- end }}
{{- else if eq $e.builder "command" }}
- --build-command={{ required "engine.command.template is required with builder=command" $e.command.template }}
- --builder-version={{ required "engine.command.version is required with builder=command" $e.command.version }}
{{- else if eq $e.builder "onnxruntime" }}
- --ort-provider={{ $e.ortProvider }}
{{- end }}
- --verify={{ $e.verify }}
- --lock-mode={{ $e.lockMode }}
- --lock-timeout={{ $e.lockTimeout }}
{{- if $e.readOnly }}
- --read-only
{{- end }}
{{- if $e.triton.enabled }}
- --triton-repo={{ .Values.handoff.mountPath }}/triton
- --triton-model={{ $e.triton.model }}
{{- end }}
{{- range $e.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}

{{/* The GPU resources of the inference container, copied so the init container builds on the same GPU. */}}
{{- define "trtwarm.gpuLimits" -}}
{{- range $name, $qty := ((.Values.workload.container.resources | default dict).limits | default dict) }}
{{- if hasPrefix "nvidia.com/" $name }}
{{ $name }}: {{ $qty | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trtwarm.initResources" -}}
{{- $gpu := include "trtwarm.gpuLimits" . | fromYaml | default dict -}}
{{- $res := deepCopy (.Values.init.resources | default dict) -}}
{{- $_ := set $res "limits" (merge (deepCopy ($res.limits | default dict)) $gpu) -}}
{{- $_ := set $res "requests" (merge (deepCopy ($res.requests | default dict)) $gpu) -}}
{{- toYaml $res }}
{{- end }}

{{- define "trtwarm.cacheMount" -}}
- name: trtwarm-cache
  mountPath: {{ .Values.cache.mountPath }}
{{- end }}

{{- define "trtwarm.initContainer" -}}
- name: trtwarm-init
  image: {{ include "trtwarm.image" (dict "image" .Values.init.image "ctx" .) }}
  imagePullPolicy: {{ .Values.init.image.pullPolicy }}
  command: ["trtwarm-init"]
  args:
    {{- include "trtwarm.initArgs" . | nindent 4 }}
  env:
    {{- include "trtwarm.podEnv" . | nindent 4 }}
    - name: TRTWARM_LOG_FORMAT
      value: {{ .Values.init.logFormat | quote }}
    {{- with .Values.init.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  resources:
    {{- include "trtwarm.initResources" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.init.securityContext | nindent 4 }}
  terminationMessagePolicy: FallbackToLogsOnError
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
    - name: trtwarm-handoff
      mountPath: {{ .Values.handoff.mountPath }}
    - name: trtwarm-tmp
      mountPath: /tmp
    {{- if .Values.engine.model.volume }}
    - name: trtwarm-model
      mountPath: {{ .Values.engine.model.mountPath }}
      readOnly: true
    {{- end }}
{{- end }}

{{- define "trtwarm.exporterContainer" -}}
- name: trtwarm-exporter
  image: {{ include "trtwarm.image" (dict "image" .Values.exporter.image "ctx" .) }}
  imagePullPolicy: {{ .Values.exporter.image.pullPolicy }}
  {{- if eq .Values.exporter.mode "native" }}
  restartPolicy: Always
  {{- end }}
  command: ["trtwarm-sidecar"]
  args:
    - --cache-dir={{ .Values.cache.mountPath }}
    - --handoff-dir={{ .Values.handoff.mountPath }}
    - --port={{ .Values.exporter.port }}
    - --scan-interval={{ .Values.exporter.scanInterval }}
    - --lock-mode={{ .Values.engine.lockMode }}
    {{- if eq .Values.gc.mode "sidecar" }}
    {{- include "trtwarm.gcArgs" (dict "prefix" "--gc-" "gc" .Values.gc) | nindent 4 }}
    - --gc-interval={{ .Values.gc.interval }}
    {{- end }}
  env:
    {{- include "trtwarm.podEnv" . | nindent 4 }}
  ports:
    - name: trtwarm-metrics
      containerPort: {{ .Values.exporter.port }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /readyz
      port: trtwarm-metrics
    periodSeconds: {{ .Values.exporter.readinessProbe.periodSeconds }}
    failureThreshold: {{ .Values.exporter.readinessProbe.failureThreshold }}
  resources:
    {{- toYaml .Values.exporter.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.exporter.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
    - name: trtwarm-handoff
      mountPath: {{ .Values.handoff.mountPath }}
      readOnly: true
    - name: trtwarm-tmp
      mountPath: /tmp
{{- end }}

{{- define "trtwarm.gcArgs" -}}
{{- with .gc.maxAge }}
- {{ $.prefix }}max-age={{ . }}
{{- end }}
{{- with .gc.maxBytes }}
- {{ $.prefix }}max-bytes={{ . }}
{{- end }}
{{- if ne (toString .gc.keepPerModel) "" }}
- {{ .prefix }}keep-per-model={{ .gc.keepPerModel }}
{{- end }}
- {{ .prefix }}quarantine-grace={{ .gc.quarantineGrace }}
{{- end }}

{{- define "trtwarm.fixPermissionsContainer" -}}
- name: trtwarm-fix-permissions
  image: {{ .Values.cache.fixPermissions.image }}
  command: ["sh", "-c", "chown {{ .Values.workload.podSecurityContext.runAsUser | default 1000 }}:{{ .Values.workload.podSecurityContext.fsGroup | default 1000 }} {{ .Values.cache.mountPath }} && chmod 2775 {{ .Values.cache.mountPath }}"]
  securityContext:
    runAsUser: 0
    runAsNonRoot: false
    allowPrivilegeEscalation: false
    capabilities:
      drop: [ALL]
      add: [CHOWN, FOWNER]
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
{{- end }}

{{/* The inference container: the user's, plus the engine env and the two mounts at the init container's paths. */}}
{{- define "trtwarm.mainContainer" -}}
{{- $c := .Values.workload.container -}}
- name: {{ $c.name }}
  image: "{{ $c.image.repository }}:{{ $c.image.tag }}"
  imagePullPolicy: {{ $c.image.pullPolicy }}
  {{- with $c.command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    - name: TRTWARM_ENGINE
      value: {{ printf "%s/engine" .Values.handoff.mountPath | quote }}
    {{- with $c.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $c.ports }}
  ports:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $c.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- range $probe := list "startupProbe" "readinessProbe" "livenessProbe" "securityContext" }}
  {{- with index $c $probe }}
  {{ $probe }}:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- end }}
  volumeMounts:
    - name: trtwarm-cache
      mountPath: {{ .Values.cache.mountPath }}
      readOnly: true
    - name: trtwarm-handoff
      mountPath: {{ .Values.handoff.mountPath }}
      readOnly: true
    {{- with $c.volumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{- define "trtwarm.cacheVolume" -}}
- name: trtwarm-cache
{{- if eq .Values.cache.type "pvc" }}
  persistentVolumeClaim:
    claimName: {{ include "trtwarm.cacheClaim" . }}
{{- else if eq .Values.cache.type "hostPath" }}
  hostPath:
    path: {{ .Values.cache.hostPath.path }}
    type: {{ .Values.cache.hostPath.type }}
{{- else if eq .Values.cache.type "emptyDir" }}
  emptyDir:
    sizeLimit: {{ .Values.cache.emptyDir.sizeLimit }}
{{- else }}
{{- fail (printf "cache.type must be pvc, hostPath or emptyDir, not %q" .Values.cache.type) }}
{{- end }}
{{- end }}

{{- define "trtwarm.podSpec" -}}
{{- if and .Values.exporter.enabled (eq .Values.exporter.mode "native") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail "exporter.mode=native needs Kubernetes 1.29 or newer (native sidecars); set exporter.mode=legacy" }}
{{- end }}
{{- with .Values.workload.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "trtwarm.serviceAccountName" . }}
serviceAccountName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.workload.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ .Values.workload.terminationGracePeriodSeconds }}
{{- with .Values.workload.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.workload.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.workload.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
initContainers:
  {{- if and .Values.exporter.enabled (eq .Values.exporter.mode "native") }}
  {{- include "trtwarm.exporterContainer" . | nindent 2 }}
  {{- end }}
  {{- if .Values.cache.fixPermissions.enabled }}
  {{- include "trtwarm.fixPermissionsContainer" . | nindent 2 }}
  {{- end }}
  {{- with .Values.workload.extraInitContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- include "trtwarm.initContainer" . | nindent 2 }}
containers:
  {{- include "trtwarm.mainContainer" . | nindent 2 }}
  {{- if and .Values.exporter.enabled (eq .Values.exporter.mode "legacy") }}
  {{- include "trtwarm.exporterContainer" . | nindent 2 }}
  {{- end }}
  {{- with .Values.workload.extraContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumes:
  {{- include "trtwarm.cacheVolume" . | nindent 2 }}
  - name: trtwarm-handoff
    emptyDir:
      sizeLimit: 16Mi
  - name: trtwarm-tmp
    emptyDir: {}
  {{- with .Values.engine.model.volume }}
  - name: trtwarm-model
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.workload.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "trtwarm.podTemplate" -}}
metadata:
  labels:
    {{- include "trtwarm.selectorLabels" . | nindent 4 }}
    {{- with .Values.workload.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.workload.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- include "trtwarm.podSpec" . | trim | nindent 2 }}
{{- end }}
