{{/* The trtwarm-init container: its flags, environment and resources (the inference container's GPUs). */}}

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
{{- include "trtwarm.resources" $res }}
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
