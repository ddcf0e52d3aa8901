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

{{/* The central engine repository (remote.*): where it is and how to authenticate; never a secret's value. */}}
{{- define "trtwarm.remoteEnv" -}}
{{- $r := .Values.remote }}
{{- $env := list }}
{{- if $r.url }}
{{- $env = append $env (dict "name" "TRTWARM_REMOTE" "value" (toString $r.url)) }}
{{- $env = append $env (dict "name" "TRTWARM_REMOTE_PUSH" "value" (toString $r.push)) }}
{{- $env = append $env (dict "name" "AWS_REGION" "value" (toString $r.region)) }}
{{- with $r.endpoint }}{{ $env = append $env (dict "name" "AWS_ENDPOINT_URL" "value" (toString .)) }}{{ end }}
{{- if $r.allowHttp }}{{ $env = append $env (dict "name" "AWS_ALLOW_HTTP" "value" "true") }}{{ end }}
{{- with $r.tensorrtVersion }}{{ $env = append $env (dict "name" "TRTWARM_TENSORRT_VERSION" "value" (toString .)) }}{{ end }}
{{- if $r.oci.insecure }}{{ $env = append $env (dict "name" "TRTWARM_INSECURE_REGISTRY" "value" "true") }}{{ end }}
{{- if $r.oci.authSecret }}{{ $env = append $env (dict "name" "REGISTRY_AUTH_FILE" "value" "/etc/trtwarm/registry/.dockerconfigjson") }}{{ end }}
{{- end }}
{{- toYaml $env }}
{{- end }}

{{- define "trtwarm.remoteEnvFrom" -}}
{{- if and .Values.remote.url .Values.remote.credentials.secretName }}
envFrom:
  - secretRef:
      name: {{ .Values.remote.credentials.secretName | quote }}
{{- end }}
{{- end }}

{{- define "trtwarm.serviceAccountName" -}}
{{- if include "trtwarm.createServiceAccount" . }}{{ default (include "trtwarm.fullname" .) .Values.serviceAccount.name }}
{{- else }}{{ .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{/* An image reference: (dict "image" .Values.x.image "ctx" . "what" "x.image" "default" "<tag>").
`registry` (or global.imageRegistry) replaces the repository's registry host; `digest` pins it (tag ignored). */}}
{{- define "trtwarm.image" -}}
{{- $global := (.ctx.Values.global | default dict) }}
{{- $repo := include "trtwarm.withRegistry" (dict "ref" .image.repository "registry" (.image.registry | default $global.imageRegistry)) }}
{{- if .image.digest }}
{{- printf "%s@%s" $repo .image.digest }}
{{- else }}
{{- $tag := toString (.image.tag | default .default | default "") }}
{{- if not $tag }}
{{- fail (printf "%s.tag is empty: set a tag (e.g. %s.tag=25.08-py3) or pin %s.digest=sha256:..." .what .what .what) }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/* `ref` with its registry host replaced by `registry` (a first path part with a "." or ":" or "localhost" is a
host); a ref without a host gets `registry/` in front. */}}
{{- define "trtwarm.withRegistry" -}}
{{- if not .registry }}{{ .ref }}
{{- else }}
{{- $parts := splitList "/" .ref }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- printf "%s/%s" (trimSuffix "/" .registry) (join "/" (rest $parts)) }}
{{- else }}
{{- printf "%s/%s" (trimSuffix "/" .registry) .ref }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trtwarm.cacheClaim" -}}
{{- if .Values.cache.pvc.existingClaim }}{{ .Values.cache.pvc.existingClaim }}
{{- else if .Values.cache.pvc.create }}{{ include "trtwarm.nameWithSuffix" (dict "ctx" . "suffix" "cache" "max" 63) }}
{{- else }}
{{- fail "cache.pvc.create=false needs cache.pvc.existingClaim (the name of a ReadWriteMany claim), or use cache.type=hostPath" }}
{{- end }}
{{- end }}

{{/* A list of env vars: `base` with each variable `extra` also names replaced in place, then the rest of `extra`
(one entry per name, the last one wins): Kubernetes keeps duplicates and server-side apply refuses them. */}}
{{- define "trtwarm.env" -}}
{{- $over := dict }}
{{- range .extra }}{{ $_ := set $over .name . }}{{ end }}
{{- $out := list }}
{{- $seen := dict }}
{{- range (concat .base .extra) }}
{{- if not (hasKey $seen .name) }}
{{- $out = append $out (ternary (get $over .name) . (hasKey $over .name)) }}
{{- $_ := set $seen .name true }}
{{- end }}
{{- end }}
{{- toYaml $out }}
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

{{/* `trtwarm init` arguments from .Values.engine, as a YAML list of plain strings (so `: `, ` #` and quotes in a
value stay part of the argument). */}}
{{- define "trtwarm.initArgs" -}}
{{- $e := .Values.engine -}}
{{- $a := list (printf "--model=%v" $e.model.path) (printf "--cache-dir=%v" .Values.cache.mountPath) -}}
{{- $a = append $a (printf "--handoff-dir=%v" .Values.handoff.mountPath) -}}
{{- $a = append $a (printf "--builder=%v" $e.builder) -}}
{{- with $e.precision }}{{ $a = append $a (printf "--precision=%v" .) }}{{ end -}}
{{- range $input, $dims := $e.shapes }}{{ $a = append $a (printf "--shape=%v=%v" $input $dims) }}{{ end -}}
{{- if and $e.shapes $e.profiles -}}
{{- fail "engine.shapes and engine.profiles do not mix: give every profile in engine.profiles" -}}
{{- end -}}
{{- range $e.profiles }}{{ $a = append $a (printf "--profile=%v" .) }}{{ end -}}
{{- with $e.name }}{{ $a = append $a (printf "--name=%v" .) }}{{ end -}}
{{- range $k, $v := $e.keyExtra }}{{ $a = append $a (printf "--key-extra=%v=%s" $k (include "trtwarm.scalar" $v)) }}{{ end -}}
{{- if eq $e.builder "tensorrt" -}}
{{- with $e.tensorrt.workspace }}{{ $a = append $a (printf "--workspace=%v" .) }}{{ end -}}
{{- if ne (toString $e.tensorrt.optLevel) "" }}{{ $a = append $a (printf "--opt-level=%v" $e.tensorrt.optLevel) }}{{ end -}}
{{- $a = append $a (printf "--hardware-compat=%v" $e.tensorrt.hardwareCompat) -}}
{{- $a = append $a (printf "--tf32=%v" $e.tensorrt.tf32) -}}
{{- if $e.tensorrt.versionCompatible }}{{ $a = append $a "--version-compatible" }}{{ end -}}
{{- if $e.tensorrt.excludeLeanRuntime }}{{ $a = append $a "--exclude-lean-runtime" }}{{ end -}}
{{- range $e.tensorrt.plugins }}{{ $a = append $a (printf "--plugin=%v" .) }}{{ end -}}
{{- else if eq $e.builder "command" -}}
{{- $a = append $a (printf "--build-command=%v" (required "engine.command.template is required with builder=command" $e.command.template)) -}}
{{- $a = append $a (printf "--builder-version=%v" (required "engine.command.version is required with builder=command" $e.command.version)) -}}
{{- else if eq $e.builder "onnxruntime" -}}
{{- $a = append $a (printf "--ort-provider=%v" $e.ortProvider) -}}
{{- end -}}
{{- $a = append $a (printf "--verify=%v" $e.verify) -}}
{{- if or (eq $e.verify "stamp") (ne .Values.trust.mode "off") }}{{ $a = append $a (printf "--stamp-max-age=%v" $e.stamps.maxAge) }}{{ end -}}
{{- if $e.stamps.hostPath -}}
{{- if and (ne $e.verify "stamp") (eq .Values.trust.mode "off") }}{{ fail "engine.stamps.hostPath needs engine.verify=stamp or a trust.mode (only stamped hits and signature records use it)" }}{{ end -}}
{{- $cachePath := clean .Values.cache.hostPath.path -}}
{{- $stampsPath := clean $e.stamps.hostPath -}}
{{- if and (eq .Values.cache.type "hostPath") (or (eq $stampsPath $cachePath) (hasPrefix (printf "%s/" (trimSuffix "/" $cachePath)) $stampsPath)) }}{{ fail "engine.stamps.hostPath is inside cache.hostPath.path: a writer of the cache could forge stamps; choose a node directory outside the cache" }}{{ end -}}
{{- $a = append $a "--stamp-dir=/var/lib/trtwarm-stamps" -}}
{{- end -}}
{{- $a = append $a (printf "--lock-mode=%v" $e.lockMode) -}}
{{- $a = append $a (printf "--lock-timeout=%v" $e.lockTimeout) -}}
{{- $a = append $a (printf "--progress-interval=%v" $e.progressInterval) -}}
{{- if eq (include "trtwarm.handoffMode" .) "copy" }}{{ $a = append $a "--handoff=copy" }}{{ end -}}
{{- if or $e.readOnly (and .Values.remote.url .Values.remote.pullOnly) }}{{ $a = append $a "--read-only" }}{{ end -}}
{{- with .Values.engines.image.reference }}{{ $a = append $a (printf "--seed-cache=%s/cache" $.Values.engines.image.mountPath) }}{{ end -}}
{{- if $e.triton.enabled -}}
{{- $a = append $a (printf "--triton-repo=%v/triton" .Values.handoff.mountPath) -}}
{{- $a = append $a (printf "--triton-model=%v" $e.triton.model) -}}
{{- end -}}
{{- with include "trtwarm.trustArgs" . | trim }}{{ range fromYamlArray . }}{{ $a = append $a . }}{{ end }}{{ end -}}
{{- range $e.extraArgs }}{{ $a = append $a (toString .) }}{{ end -}}
{{- toYaml $a }}
{{- end }}

{{/* The GPU resources of the inference container (limits, then requests), copied so the init container builds on
the same GPU. */}}
{{- define "trtwarm.gpuLimits" -}}
{{- $res := .Values.workload.container.resources | default dict }}
{{- $all := merge (deepCopy ($res.limits | default dict)) ($res.requests | default dict) }}
{{- range $name, $qty := $all }}
{{- if and (hasPrefix "nvidia.com/" $name) (ne (toString $qty) "<nil>") }}
{{ $name }}: {{ $qty | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trtwarm.initResources" -}}
{{- $gpu := include "trtwarm.gpuLimits" . | fromYaml | default dict -}}
{{- $res := deepCopy (.Values.init.resources | default dict) -}}
{{- $_ := set $res "limits" (merge (deepCopy ($res.limits | default dict)) $gpu) -}}
{{- $_ := set $res "requests" (merge (deepCopy ($res.requests | default dict)) $gpu) -}}
{{- /* DRA: the server's resource claims (a GPU by claim, workload.containerExtra.resources.claims) are the init's
too: containers of one Pod may share a claim, so the engine is built on the device the server gets. */}}
{{- $main := include "trtwarm.mainContainer" . | fromYamlArray | first -}}
{{- with ($main.resources | default dict).claims }}{{ $_ := set $res "claims" (concat ($res.claims | default list) .) }}{{ end -}}
{{- toYaml $res }}
{{- end }}

{{- define "trtwarm.cacheMount" -}}
- name: trtwarm-cache
  mountPath: {{ .Values.cache.mountPath | quote }}
{{- end }}

{{/* The service-account token, projected into trtwarm init only (for Events) when the Pod does not automount it. */}}
{{- define "trtwarm.eventsToken" -}}
{{- if and .Values.rbac.events (not .Values.serviceAccount.automount) }}true{{ end }}
{{- end }}

{{- define "trtwarm.initContainer" -}}
- name: trtwarm-init
  {{- if and .Values.remote.url .Values.remote.pullOnly }}
  image: {{ include "trtwarm.image" (dict "image" .Values.remote.pullOnlyImage "ctx" . "what" "remote.pullOnlyImage" "default" .Chart.AppVersion) | quote }}
  {{- else }}
  image: {{ include "trtwarm.image" (dict "image" .Values.init.image "ctx" . "what" "init.image" "default" .Chart.AppVersion) | quote }}
  {{- end }}
  imagePullPolicy: {{ .Values.init.image.pullPolicy }}
  command: ["trtwarm-init"]
  args:
    {{- include "trtwarm.initArgs" . | nindent 4 }}
  env:
    {{- $base := concat (include "trtwarm.podEnv" . | fromYamlArray) (list (dict "name" "TRTWARM_LOG_FORMAT" "value" (toString .Values.init.logFormat))) }}
    {{- $base = concat $base (include "trtwarm.remoteEnv" . | fromYamlArray) }}
    {{- include "trtwarm.env" (dict "base" $base "extra" (.Values.init.env | default list)) | nindent 4 }}
  {{- include "trtwarm.remoteEnvFrom" . | nindent 2 }}
  resources:
    {{- include "trtwarm.initResources" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.init.securityContext | nindent 4 }}
  terminationMessagePolicy: FallbackToLogsOnError
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
      {{- if and (eq .Values.trust.role "consumer") (not (and .Values.remote.url .Values.remote.pullOnly)) }}
      readOnly: true
      {{- end }}
    {{- include "trtwarm.trustMounts" . | nindent 4 }}
    - name: trtwarm-handoff
      mountPath: {{ .Values.handoff.mountPath | quote }}
    {{- if .Values.engine.stamps.hostPath }}
    - name: trtwarm-stamps
      mountPath: /var/lib/trtwarm-stamps
    {{- end }}
    - name: trtwarm-tmp
      mountPath: /tmp
    {{- include "trtwarm.registryAuthMount" . | nindent 4 }}
    {{- if .Values.engines.image.reference }}
    - name: trtwarm-engines
      mountPath: {{ .Values.engines.image.mountPath | quote }}
      readOnly: true
    {{- end }}
    {{- if .Values.engine.model.volume }}
    - name: trtwarm-model
      mountPath: {{ .Values.engine.model.mountPath | quote }}
      readOnly: true
    {{- end }}
    {{- if include "trtwarm.eventsToken" . }}
    - name: trtwarm-sa-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- end }}
{{- end }}

{{- define "trtwarm.exporterArgs" -}}
{{- $a := list (printf "--cache-dir=%v" .Values.cache.mountPath) (printf "--handoff-dir=%v" .Values.handoff.mountPath) }}
{{- $a = append $a (printf "--port=%v" .Values.exporter.port) }}
{{- $a = append $a (printf "--scan-interval=%v" .Values.exporter.scanInterval) }}
{{- $a = append $a (printf "--lease-interval=%v" .Values.exporter.leaseInterval) }}
{{- $a = append $a (printf "--lock-mode=%v" .Values.engine.lockMode) }}
{{- if eq .Values.gc.mode "sidecar" }}
{{- $a = concat $a (include "trtwarm.gcArgs" (dict "prefix" "--gc-" "gc" .Values.gc) | fromYamlArray) }}
{{- $a = append $a (printf "--gc-interval=%v" .Values.gc.interval) }}
{{- end }}
{{- range .Values.exporter.extraArgs }}{{ $a = append $a (toString .) }}{{ end }}
{{- toYaml $a }}
{{- end }}

{{- define "trtwarm.exporterContainer" -}}
- name: trtwarm-exporter
  image: {{ include "trtwarm.image" (dict "image" .Values.exporter.image "ctx" . "what" "exporter.image" "default" .Chart.AppVersion) | quote }}
  imagePullPolicy: {{ .Values.exporter.image.pullPolicy }}
  {{- if eq .Values.exporter.mode "native" }}
  restartPolicy: Always
  {{- end }}
  command: ["trtwarm-sidecar"]
  args:
    {{- include "trtwarm.exporterArgs" . | nindent 4 }}
  env:
    {{- include "trtwarm.env" (dict "base" (include "trtwarm.podEnv" . | fromYamlArray) "extra" (.Values.exporter.env | default list)) | nindent 4 }}
  ports:
    - name: trtwarm-metrics
      containerPort: {{ .Values.exporter.port }}
      protocol: TCP
  {{- /* Ready once trtwarm init handed the engine over: a check the kubelet runs itself, so a restart of the
  exporter's process (which forgets what it saw) does not make the Pod NotReady. It looks only at the hand-off
  emptyDir (`-L`: the link, not followed), never at the cache volume: a stalled NFS server must not turn every
  replica NotReady at once (the engine is open in the server already). Under `--handoff copy` the engine is a
  file in the hand-off (`-s`). */}}
  readinessProbe:
    exec:
      command: ["test", {{ ternary "-s" "-L" (eq (include "trtwarm.handoffMode" .) "copy") | quote }}, {{ printf "%s/engine" .Values.handoff.mountPath | quote }}]
    periodSeconds: {{ .Values.exporter.readinessProbe.periodSeconds }}
    timeoutSeconds: {{ .Values.exporter.readinessProbe.timeoutSeconds }}
    failureThreshold: {{ .Values.exporter.readinessProbe.failureThreshold }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: trtwarm-metrics
    periodSeconds: {{ .Values.exporter.livenessProbe.periodSeconds }}
    timeoutSeconds: {{ .Values.exporter.livenessProbe.timeoutSeconds }}
    failureThreshold: {{ .Values.exporter.livenessProbe.failureThreshold }}
  resources:
    {{- toYaml .Values.exporter.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.exporter.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
    - name: trtwarm-handoff
      mountPath: {{ .Values.handoff.mountPath | quote }}
      readOnly: true
    - name: trtwarm-tmp
      mountPath: /tmp
{{- end }}

{{/* gc flags as a YAML list of strings, each with `prefix` ("--" or "--gc-"). */}}
{{- define "trtwarm.gcArgs" -}}
{{- $a := list }}
{{- with .gc.maxAge }}{{ $a = append $a (printf "%smax-age=%v" $.prefix .) }}{{ end }}
{{- with .gc.maxBytes }}{{ $a = append $a (printf "%smax-bytes=%v" $.prefix .) }}{{ end }}
{{- if ne (toString .gc.keepPerModel) "" }}{{ $a = append $a (printf "%skeep-per-model=%v" .prefix .gc.keepPerModel) }}{{ end }}
{{- $a = append $a (printf "%squarantine-grace=%v" .prefix .gc.quarantineGrace) }}
{{- toYaml $a }}
{{- end }}

{{/* Root, CHOWN and FOWNER only: it makes the cache root writable by the Pod's user where the volume ignores
`fsGroup`. Where root cannot chown (NFS root_squash) it says so and lets trtwarm init report an unwritable cache
with its own hint, instead of crash-looping here. */}}
{{- define "trtwarm.fixPermissionsContainer" -}}
{{- $uid := .Values.init.securityContext.runAsUser | default 1000 }}
{{- $gid := .Values.workload.podSecurityContext.fsGroup | default (.Values.init.securityContext.runAsGroup | default 1000) }}
- name: trtwarm-fix-permissions
  image: {{ include "trtwarm.withRegistry" (dict "ref" .Values.cache.fixPermissions.image "registry" (.Values.global | default dict).imageRegistry) | quote }}
  command: ["sh", "-c"]
  args:
    - {{ printf "chown %v:%v %s && chmod 2775 %s || echo 'trtwarm-fix-permissions: cannot chown %s (an NFS export with root_squash?); give the directory to uid %v on the server' >&2" $uid $gid .Values.cache.mountPath .Values.cache.mountPath .Values.cache.mountPath $uid | quote }}
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

{{/* The inference container: the user's, plus the engine env and the two mounts at the init container's paths,
then `workload.containerExtra` merged over it as is. */}}
{{- define "trtwarm.mainContainerBase" -}}
{{- $c := .Values.workload.container -}}
name: {{ $c.name }}
image: {{ include "trtwarm.image" (dict "image" $c.image "ctx" . "what" "workload.container.image") | quote }}
imagePullPolicy: {{ $c.image.pullPolicy }}
{{- range $field := list "command" "args" "envFrom" "ports" "resources" "startupProbe" "readinessProbe" "livenessProbe" "lifecycle" "securityContext" }}
{{- with index $c $field }}
{{ $field }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
env:
  {{- $base := list (dict "name" "TRTWARM_ENGINE" "value" (printf "%s/engine" .Values.handoff.mountPath)) }}
  {{- include "trtwarm.env" (dict "base" $base "extra" ($c.env | default list)) | nindent 2 }}
volumeMounts:
  - name: trtwarm-cache
    mountPath: {{ .Values.cache.mountPath | quote }}
    readOnly: true
  - name: trtwarm-handoff
    mountPath: {{ .Values.handoff.mountPath | quote }}
    readOnly: true
  {{- if .Values.engines.image.reference }}
  {{- /* a seed-tier hit hands the engine over in place: the link points into the engine image */}}
  - name: trtwarm-engines
    mountPath: {{ .Values.engines.image.mountPath | quote }}
    readOnly: true
  {{- end }}
  {{- with $c.volumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{- define "trtwarm.mainContainer" -}}
{{- $c := include "trtwarm.mainContainerBase" . | fromYaml }}
{{- $c = mustMergeOverwrite $c (deepCopy (.Values.workload.containerExtra | default dict)) }}
{{- toYaml (list $c) }}
{{- end }}

{{- define "trtwarm.cacheVolume" -}}
- name: trtwarm-cache
{{- if eq .Values.cache.type "pvc" }}
  persistentVolumeClaim:
    claimName: {{ include "trtwarm.cacheClaim" . | quote }}
{{- else if eq .Values.cache.type "hostPath" }}
{{- if and (eq .Values.cache.hostPath.type "DirectoryOrCreate") (not .Values.cache.fixPermissions.enabled) }}
{{- fail "cache.hostPath.type=DirectoryOrCreate makes a root-owned 0755 directory trtwarm cannot write: set cache.fixPermissions.enabled=true, or create the directory owned by uid 1000 and use type Directory" }}
{{- end }}
  hostPath:
    path: {{ .Values.cache.hostPath.path | quote }}
    type: {{ .Values.cache.hostPath.type }}
{{- else if eq .Values.cache.type "emptyDir" }}
  emptyDir:
    sizeLimit: {{ .Values.cache.emptyDir.sizeLimit | quote }}
{{- else }}
{{- fail (printf "cache.type must be pvc, hostPath or emptyDir, not %q" .Values.cache.type) }}
{{- end }}
{{- end }}

{{/* Guards for values that validate one by one but break together. */}}
{{- define "trtwarm.checks" -}}
{{- include "trtwarm.checksDayTwo" . }}
{{- if and .Values.exporter.enabled (eq .Values.exporter.mode "native") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail "exporter.mode=native needs Kubernetes 1.29 or newer (native sidecars); set exporter.mode=legacy" }}
{{- end }}
{{- if and (ne .Values.gc.mode "none") (not .Values.exporter.enabled) }}
{{- fail (printf "gc.mode=%s needs exporter.enabled=true: the exporter holds the Pod's in-use lease (and runs gc in sidecar mode); without it gc could remove an engine a running Pod uses" .Values.gc.mode) }}
{{- end }}
{{- end }}

{{- define "trtwarm.podSpecBase" -}}
{{- include "trtwarm.checks" . }}
{{- with .Values.workload.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "trtwarm.serviceAccountName" . }}
serviceAccountName: {{ . | quote }}
{{- end }}
automountServiceAccountToken: {{ .Values.serviceAccount.automount }}
{{- with .Values.workload.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .Values.workload.runtimeClassName }}
runtimeClassName: {{ . | quote }}
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
{{- with .Values.workload.topologySpreadConstraints }}
{{- $selector := include "trtwarm.selectorLabels" $ | fromYaml }}
topologySpreadConstraints:
  {{- range . }}
  {{- $tsc := deepCopy . }}
  {{- if not (hasKey $tsc "labelSelector") }}{{ $_ := set $tsc "labelSelector" (dict "matchLabels" $selector) }}{{ end }}
  - {{- toYaml $tsc | nindent 4 }}
  {{- end }}
{{- end }}
initContainers:
  {{- if .Values.cache.fixPermissions.enabled }}
  {{- include "trtwarm.fixPermissionsContainer" . | nindent 2 }}
  {{- end }}
  {{- if and .Values.exporter.enabled (eq .Values.exporter.mode "native") }}
  {{- include "trtwarm.exporterContainer" . | nindent 2 }}
  {{- end }}
  {{- with .Values.workload.extraInitContainers }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- include "trtwarm.enginesCopyContainers" . | nindent 2 }}
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
  {{- include "trtwarm.trustVolumes" . | nindent 2 }}
  - name: trtwarm-handoff
    emptyDir:
      sizeLimit: {{ include "trtwarm.handoffSizeLimit" . | quote }}
  - name: trtwarm-tmp
    emptyDir: {}
  {{- include "trtwarm.enginesVolumes" . | nindent 2 }}
  {{- include "trtwarm.registryAuthVolume" . | nindent 2 }}
  {{- with .Values.engine.stamps.hostPath }}
  - name: trtwarm-stamps
    hostPath:
      path: {{ . | quote }}
      type: Directory
  {{- end }}
  {{- with .Values.engine.model.volume }}
  - name: trtwarm-model
    {{- include "trtwarm.readOnlyVolume" . | nindent 4 }}
  {{- end }}
  {{- if include "trtwarm.eventsToken" . }}
  - name: trtwarm-sa-token
    projected:
      sources:
        - serviceAccountToken:
            path: token
            expirationSeconds: 3607
        - configMap:
            name: kube-root-ca.crt
            items: [{key: ca.crt, path: ca.crt}]
        - downwardAPI:
            items:
              - path: namespace
                fieldRef: {fieldPath: metadata.namespace}
  {{- end }}
  {{- with .Values.workload.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The Pod spec, with `workload.podSpecExtra` merged over it as is (maps merge, lists are replaced). */}}
{{- define "trtwarm.podSpec" -}}
{{- $spec := include "trtwarm.podSpecBase" . | fromYaml }}
{{- if hasKey $spec "Error" }}
{{- fail (printf "trtwarm: the rendered Pod spec is not valid YAML: %s" $spec.Error) }}
{{- end }}
{{- toYaml (mustMergeOverwrite $spec (deepCopy (.Values.workload.podSpecExtra | default dict))) }}
{{- end }}

{{- define "trtwarm.podTemplate" -}}
metadata:
  labels:
    {{- include "trtwarm.selectorLabels" . | nindent 4 }}
    {{- with .Values.workload.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with include "trtwarm.podAnnotations" . }}
  annotations:
    {{- . | nindent 4 }}
  {{- end }}
spec:
  {{- include "trtwarm.podSpec" . | trim | nindent 2 }}
{{- end }}

{{/* Relabelings that give every scraped series a `cache_volume` label naming the cache volume (the claim, the node
of a hostPath cache, or the Pod of an emptyDir one), so per-volume metrics aggregate by volume, not across them. */}}
{{- define "trtwarm.cacheVolumeRelabelings" -}}
{{- if eq .Values.cache.type "pvc" }}
- targetLabel: cache_volume
  replacement: {{ printf "pvc/%s" (include "trtwarm.cacheClaim" .) }}
{{- else if eq .Values.cache.type "hostPath" }}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: cache_volume
  replacement: hostPath/$1
{{- else }}
- sourceLabels: [__meta_kubernetes_pod_name]
  targetLabel: cache_volume
  replacement: emptyDir/$1
{{- end }}
{{- end }}

{{/* Labels of the chart's Job Pods (gc, prebuild, helm test): their own `app.kubernetes.io/name`, so the
workload's selector, the PodMonitor, the PDB and the Services never select them. (dict "ctx" . "component" "gc") */}}
{{- define "trtwarm.componentLabels" -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "trtwarm.name" .ctx) .component | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: {{ include "trtwarm.name" .ctx }}
{{- end }}

{{/* The GPU resources a prebuild Job asks for: `remote.prebuild.resources`, plus the inference container's
`nvidia.com/*` (a MIG slice included) where it names none itself. */}}
{{- define "trtwarm.prebuildResources" -}}
{{- $res := deepCopy (.Values.remote.prebuild.resources | default dict) -}}
{{- $own := false -}}
{{- range $part := list "limits" "requests" }}{{ range $k, $_ := (index $res $part | default dict) }}{{ if hasPrefix "nvidia.com/" $k }}{{ $own = true }}{{ end }}{{ end }}{{ end -}}
{{- if not $own -}}
{{- $gpu := include "trtwarm.gpuLimits" . | fromYaml | default dict -}}
{{- $_ := set $res "limits" (merge (deepCopy ($res.limits | default dict)) $gpu) -}}
{{- $_ := set $res "requests" (merge (deepCopy ($res.requests | default dict)) $gpu) -}}
{{- end -}}
{{- toYaml $res }}
{{- end }}

{{/* The Pod spec of one prebuild Job (dict "ctx" . "product" "NVIDIA-H100-80GB-HBM3" "config" "<ConfigMap>"). */}}
{{- define "trtwarm.prebuildPodSpec" -}}
{{- $ := .ctx -}}
restartPolicy: Never
{{- with include "trtwarm.serviceAccountName" $ }}
serviceAccountName: {{ . | quote }}
{{- end }}
automountServiceAccountToken: false
{{- with $.Values.workload.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.workload.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
securityContext:
  {{- toYaml $.Values.workload.podSecurityContext | nindent 2 }}
nodeSelector:
  nvidia.com/gpu.product: {{ .product | quote }}
{{- with $.Values.remote.prebuild.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: prebuild
    image: {{ include "trtwarm.image" (dict "image" $.Values.init.image "ctx" $ "what" "init.image" "default" $.Chart.AppVersion) | quote }}
    imagePullPolicy: {{ $.Values.init.image.pullPolicy }}
    command: ["trtwarm", "prebuild", "--matrix=/etc/trtwarm/matrix.json"]
    env:
      {{- $base := concat (include "trtwarm.podEnv" $ | fromYamlArray) (list (dict "name" "TRTWARM_LOG_FORMAT" "value" (toString $.Values.init.logFormat))) }}
      {{- /* every row checks entries against the release's trust policy and signs what it builds (the rows' own
      flags come from the matrix; these are their defaults) */}}
      {{- if include "trtwarm.trustEnabled" $ }}
      {{- $base = concat $base (list (dict "name" "TRTWARM_TRUST_POLICY" "value" "/etc/trtwarm/trust/policy.json") (dict "name" "TRTWARM_TRUST_MODE" "value" (toString $.Values.trust.mode))) }}
      {{- end }}
      {{- if $.Values.trust.signingKey.existingSecret }}
      {{- $base = append $base (dict "name" "TRTWARM_SIGNING_KEY" "value" (printf "/etc/trtwarm/signing/%s" $.Values.trust.signingKey.key)) }}
      {{- end }}
      {{- include "trtwarm.env" (dict "base" (concat $base (include "trtwarm.remoteEnv" $ | fromYamlArray)) "extra" ($.Values.init.env | default list)) | nindent 6 }}
    {{- include "trtwarm.remoteEnvFrom" $ | nindent 4 }}
    resources:
      {{- include "trtwarm.prebuildResources" $ | nindent 6 }}
    securityContext:
      {{- toYaml $.Values.init.securityContext | nindent 6 }}
    terminationMessagePolicy: FallbackToLogsOnError
    volumeMounts:
      - name: matrix
        mountPath: /etc/trtwarm
        readOnly: true
      - name: tmp
        mountPath: /tmp
      {{- include "trtwarm.registryAuthMount" $ | nindent 6 }}
      {{- if $.Values.engine.model.volume }}
      - name: model
        mountPath: {{ $.Values.engine.model.mountPath | quote }}
        readOnly: true
      {{- end }}
      {{- if include "trtwarm.trustEnabled" $ }}
      - name: trtwarm-trust
        mountPath: /etc/trtwarm/trust
        readOnly: true
      {{- end }}
      {{- if $.Values.trust.signingKey.existingSecret }}
      - name: trtwarm-signing
        mountPath: /etc/trtwarm/signing
        readOnly: true
      {{- end }}
volumes:
  - name: matrix
    configMap:
      name: {{ .config }}
  {{- if include "trtwarm.trustEnabled" $ }}
  - name: trtwarm-trust
    configMap:
      name: {{ include "trtwarm.trustConfigMap" $ | quote }}
  {{- end }}
  {{- if $.Values.trust.signingKey.existingSecret }}
  - name: trtwarm-signing
    secret:
      secretName: {{ $.Values.trust.signingKey.existingSecret | quote }}
      defaultMode: 0440
  {{- end }}
  - name: tmp
    emptyDir: {}
  {{- include "trtwarm.registryAuthVolume" $ | nindent 2 }}
  {{- with $.Values.engine.model.volume }}
  - name: model
    {{- include "trtwarm.readOnlyVolume" . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* A volume source with a claim made read-only unless it says otherwise: the kubelet then leaves its ownership
alone (fsGroup would re-own a shared model volume) and nothing here can write the models. */}}
{{- define "trtwarm.readOnlyVolume" -}}
{{- $v := deepCopy . }}
{{- if and $v.persistentVolumeClaim (not (hasKey $v.persistentVolumeClaim "readOnly")) }}
{{- $_ := set $v.persistentVolumeClaim "readOnly" true }}
{{- end }}
{{- toYaml $v }}
{{- end }}

{{/* The workload Pod's annotations: a checksum of each ConfigMap the chart renders for it (a changed trust policy
rolls the Pods, which read it only at start), then `workload.podAnnotations`. */}}
{{- define "trtwarm.podAnnotations" -}}
{{- $a := dict }}
{{- if and (include "trtwarm.trustEnabled" .) (not .Values.trust.existingConfigMap) }}
{{- $_ := set $a "checksum/trust" (include (print .Template.BasePath "/configmap-trust.yaml") . | sha256sum) }}
{{- end }}
{{- if and .Values.remote.url (not .Values.remote.credentials.secretName) }}
{{- /* Workload identity (IRSA): the EKS webhook gives every container the role's web-identity token unless the Pod
names the containers to skip; only trtwarm init talks to the repository. */}}
{{- $names := list .Values.workload.container.name }}
{{- if .Values.exporter.enabled }}{{ $names = append $names "trtwarm-exporter" }}{{ end }}
{{- if .Values.cache.fixPermissions.enabled }}{{ $names = append $names "trtwarm-fix-permissions" }}{{ end }}
{{- range concat (.Values.workload.extraInitContainers | default list) (.Values.workload.extraContainers | default list) }}{{ $names = append $names .name }}{{ end }}
{{- $_ := set $a "eks.amazonaws.com/skip-containers" (join "," $names) }}
{{- end }}
{{- $a = merge (deepCopy (.Values.workload.podAnnotations | default dict)) $a }}
{{- if $a }}{{ toYaml $a }}{{ end }}
{{- end }}

{{/* A value as written in values.yaml: YAML reads 20250101 as a float, which `%v` prints as 2.0250101e+07. */}}
{{- define "trtwarm.scalar" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}{{ int64 . }}{{ else }}{{ toString . }}{{ end }}
{{- end }}

{{/* How trtwarm init hands the engine over: `link` (a symlink into the cache) or `copy` (a private copy in the
hand-off emptyDir, which no writer of the cache can change after the check). `auto`: copy under trust.mode=enforce. */}}
{{- define "trtwarm.handoffMode" -}}
{{- if eq .Values.handoff.mode "auto" }}{{ ternary "copy" "link" (eq .Values.trust.mode "enforce") }}
{{- else }}{{ .Values.handoff.mode }}{{ end }}
{{- end }}

{{- define "trtwarm.handoffSizeLimit" -}}
{{- if .Values.handoff.sizeLimit }}{{ .Values.handoff.sizeLimit }}
{{- else }}{{ ternary .Values.cache.emptyDir.sizeLimit "16Mi" (eq (include "trtwarm.handoffMode" .) "copy") }}{{ end }}
{{- end }}

{{/* The named ports of the Pod's containers, by port name and number (one document: {"names": [...], "numbers":
[...]}). */}}
{{- define "trtwarm.serverPorts" -}}
{{- $names := list }}{{ $numbers := list }}
{{- range (concat (list (include "trtwarm.mainContainer" . | fromYamlArray | first)) (.Values.workload.extraContainers | default list)) }}
{{- range (.ports | default list) }}
{{- with .name }}{{ $names = append $names . }}{{ end }}
{{- $numbers = append $numbers (int .containerPort) }}
{{- end }}
{{- end }}
{{- toJson (dict "names" $names "numbers" $numbers) }}
{{- end }}

{{/* Renders that validate but could never become Ready (issue 28 F8), and values that would harm the node (F18) or
expose the signing key (F6): refused at `helm template` time, naming the values. Run whether or not the chart renders
the workload (templates/validate.yaml). */}}
{{- define "trtwarm.checksDayTwo" -}}
{{- $v := .Values }}
{{- $c := include "trtwarm.mainContainer" . | fromYamlArray | first }}
{{- $ports := include "trtwarm.serverPorts" . | fromJson }}
{{- range $probe := list "startupProbe" "readinessProbe" "livenessProbe" }}
{{- $p := index $c $probe | default dict }}
{{- range $how := list "httpGet" "tcpSocket" }}
{{- $port := dig $how "port" "" $p }}
{{- if and (kindIs "string" $port) $port (not (has $port $ports.names)) }}
{{- fail (printf "workload.container.%s.%s.port %q names no port of workload.container.ports (it has %v): the probe could never succeed; rename it there too, or give the number" $probe $how $port $ports.names) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $v.exporter.enabled }}
{{- $triton := or (has "tritonserver" ($c.command | default list)) (contains "tritonserver" $v.workload.container.image.repository) }}
{{- $taken := ternary (list 8000 8001 8002) list $triton }}
{{- range $ports.numbers }}{{ $taken = append $taken (int .) }}{{ end }}
{{- if has (int $v.exporter.port) $taken }}
{{- fail (printf "exporter.port=%v is taken by the inference container (its ports %v%s): the Pod's containers share one network namespace; choose another exporter.port (default 9400)" $v.exporter.port $ports.numbers (ternary ", Triton's 8000/8001/8002" "" $triton)) }}
{{- end }}
{{- end }}
{{- if eq $v.cache.type "emptyDir" }}
{{- $pulls := and $v.remote.url $v.remote.pullOnly }}
{{- if and (eq $v.trust.role "consumer") (not $pulls) }}
{{- fail "cache.type=emptyDir with trust.role=consumer: a consumer mounts the cache read-only and never builds, and a new emptyDir is empty, so no engine could ever arrive; use a shared pvc cache, or remote.url with remote.pullOnly=true" }}
{{- end }}
{{- if and $v.engine.readOnly (not $v.remote.url) }}
{{- fail "cache.type=emptyDir with engine.readOnly=true: the Pod never builds and nothing else writes its private emptyDir, so it could never become Ready; use a shared pvc cache, or remote.url to pull the engine" }}
{{- end }}
{{- end }}
{{- if eq $v.cache.type "hostPath" }}
{{- include "trtwarm.checkHostPath" (dict "path" $v.cache.hostPath.path "what" "cache.hostPath.path") }}
{{- end }}
{{- with $v.engine.stamps.hostPath }}
{{- include "trtwarm.checkHostPath" (dict "path" . "what" "engine.stamps.hostPath") }}
{{- end }}
{{- if and $v.remote.prebuild.enabled (eq $v.trust.mode "enforce") (not $v.trust.signingKey.existingSecret) }}
{{- fail "remote.prebuild.enabled with trust.mode=enforce needs trust.signingKey.existingSecret: the prebuild Jobs sign what they build, and unsigned entries would be refused by every consumer" }}
{{- end }}
{{- $names := list $v.workload.container.name "trtwarm-init" }}
{{- if $v.exporter.enabled }}{{ $names = append $names "trtwarm-exporter" }}{{ end }}
{{- if $v.cache.fixPermissions.enabled }}{{ $names = append $names "trtwarm-fix-permissions" }}{{ end }}
{{- range concat ($v.workload.extraInitContainers | default list) ($v.workload.extraContainers | default list) }}
{{- if has .name $names }}{{ fail (printf "workload.extraInitContainers/extraContainers: a container is named %q twice in the Pod (names the chart uses: %v); rename it" .name $names) }}{{ end }}
{{- $names = append $names .name }}
{{- end }}
{{- if has $v.workload.container.name (list "trtwarm-init" "trtwarm-exporter" "trtwarm-fix-permissions") }}
{{- fail (printf "workload.container.name=%q is the name of a trtwarm container; choose another" $v.workload.container.name) }}
{{- end }}
{{- range ($v.workload.extraVolumes | default list) }}
{{- if hasPrefix "trtwarm-" (toString .name) }}{{ fail (printf "workload.extraVolumes: %q is a name the chart uses for its own volumes (trtwarm-*); rename it" .name) }}{{ end }}
{{- end }}
{{- if and (include "trtwarm.trustSigns" .) (or (eq $v.engine.builder "command") $v.engine.tensorrt.plugins) (not $v.trust.signingKey.allowUntrustedBuildSteps) }}
{{- fail (printf "trust.signingKey.existingSecret is mounted in the container that runs %s: code from there could read the signing key; build and sign in a prebuild Job you trust instead (trust.role=consumer here), or accept it with trust.signingKey.allowUntrustedBuildSteps=true" (ternary "engine.command.template" "engine.tensorrt.plugins" (eq $v.engine.builder "command"))) }}
{{- end }}
{{- end }}

{{/* A node directory trtwarm may own (its init chowns the cache root): never the root or a system directory. */}}
{{- define "trtwarm.checkHostPath" -}}
{{- $p := clean .path }}
{{- $system := list "/" "/bin" "/boot" "/dev" "/etc" "/home" "/lib" "/lib32" "/lib64" "/opt" "/proc" "/root" "/run" "/sbin" "/srv" "/sys" "/tmp" "/usr" "/var" "/var/lib" "/var/log" "/var/run" "/var/tmp" "/var/lib/kubelet" "/var/lib/containerd" "/var/lib/docker" "/mnt" "/media" }}
{{- $under := list "/proc" "/sys" "/dev" "/etc" "/boot" "/usr" "/bin" "/sbin" "/lib" "/lib64" "/run" "/var/run" "/var/lib/kubelet" "/var/lib/containerd" "/var/lib/docker" "/var/log" }}
{{- $bad := has $p $system }}
{{- range $under }}{{ if hasPrefix (printf "%s/" .) $p }}{{ $bad = true }}{{ end }}{{ end }}
{{- if $bad }}
{{- fail (printf "%s=%q is the root or a system directory of the node: trtwarm would own and write it; use a directory of its own such as /var/lib/trtwarm/cache" .what .path) }}
{{- end }}
{{- end }}

{{/* The ports of the inference Service: `service.ports`, else the inference container's. */}}
{{- define "trtwarm.servicePorts" -}}
{{- toYaml (.Values.service.ports | default (include "trtwarm.mainContainer" . | fromYamlArray | first).ports | default list) }}
{{- end }}

{{/* `remote.oci.authSecret`: a kubernetes.io/dockerconfigjson Secret (e.g. the image pull secret) for an oci://
repository, mounted where REGISTRY_AUTH_FILE (trtwarm.remoteEnv) points, in the containers that reach the registry. */}}
{{- define "trtwarm.registryAuthMount" -}}
{{- if and .Values.remote.url .Values.remote.oci.authSecret }}
- name: trtwarm-registry-auth
  mountPath: /etc/trtwarm/registry
  readOnly: true
{{- end }}
{{- end }}

{{- define "trtwarm.registryAuthVolume" -}}
{{- if and .Values.remote.url .Values.remote.oci.authSecret }}
- name: trtwarm-registry-auth
  secret:
    secretName: {{ .Values.remote.oci.authSecret | quote }}
    defaultMode: 0440
{{- end }}
{{- end }}
