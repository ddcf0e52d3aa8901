{{/* The node pre-warm: one DaemonSet per GPU class of `prewarm.gpus`, pinned to that GPU's nodes by GPU Feature
Discovery's labels, whose init container keys the pre-warm list for that GPU from its declared facts (no GPU, no
device request, no GPU library) and pulls what the repository holds; then the sidecar exports what the node holds. */}}

{{/* The GPU classes as a JSON list: each with its `product`, `computeCapability` ("9.0"), `memoryGiB` ("80" or
"none"), `nodeSelector` (the class's pin over `prewarm.nodeSelector`) and `id` (a label value naming the class: a
readable part of the product and a hash of it, stable across upgrades). */}}
{{- define "trtwarm.prewarmGpus" -}}
{{- $out := list }}
{{- $seen := dict }}
{{- range $i, $g := .Values.prewarm.gpus }}
{{- $product := toString $g.product | trim }}
{{- if hasKey $seen $product }}{{ fail (printf "prewarm.gpus lists %q twice" $product) }}{{ end }}
{{- $_ := set $seen $product true }}
{{- /* a number prints as written (`8.9`, `9` for 9.0), an int from `--set` as `9` too: MAJOR.MINOR either way */}}
{{- $cc := toString $g.computeCapability }}
{{- if regexMatch "^[0-9]+$" $cc }}{{ $cc = printf "%s.0" $cc }}{{ end }}
{{- $memory := include "trtwarm.scalar" $g.memoryGiB }}
{{- $pin := $g.nodeSelector }}
{{- if not $pin }}{{ $pin = include "trtwarm.prewarmPin" (dict "product" $product "index" $i "mig" $.Values.prewarm.migStrategy) | fromJson }}{{ end }}
{{- $slug := regexReplaceAll "[^a-z0-9]+" (lower $product | trimPrefix "nvidia ") "-" | trunc 24 | trimAll "-" }}
{{- $id := printf "%s-%s" $slug ($product | sha256sum | trunc 8) | trimPrefix "-" }}
{{- $selector := merge (deepCopy $pin) (deepCopy ($.Values.prewarm.nodeSelector | default dict)) }}
{{- $out = append $out (dict "product" $product "computeCapability" $cc "memoryGiB" $memory "nodeSelector" $selector "id" $id) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* The node label GPU Feature Discovery gives a GPU class, as a JSON map (dict "product" "<NVML name>" "index" <i>
"mig" "single|mixed"): `nvidia.com/gpu.product`, the NVML name with spaces as `-` (a MIG slice's under the `single`
strategy: `<GPU>-MIG-<profile>`); under `mixed` a MIG slice's is `nvidia.com/mig-<profile>.product` (the node's
`gpu.product` is then the whole GPU's). A MIG profile's `+` is `.` in both (`1g.10gb+me`: `mig-1g.10gb.me`), as the
device plugin names the resource. */}}
{{- define "trtwarm.prewarmPin" -}}
{{- $label := replace " " "-" .product }}
{{- $key := "nvidia.com/gpu.product" }}
{{- $profile := regexFind "-MIG-[^-]+$" $label | trimPrefix "-MIG-" | replace "+" "." }}
{{- if $profile }}{{ $label = printf "%s-MIG-%s" (regexReplaceAll "-MIG-[^-]+$" $label "") $profile }}{{ end }}
{{- if and $profile (eq (toString .mig) "mixed") }}{{ $key = printf "nvidia.com/mig-%s.product" $profile }}{{ end }}
{{- $name := trimPrefix "nvidia.com/" $key }}
{{- if not (and (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" $label) (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$" $name)) }}
{{- fail (printf "prewarm.gpus[%d]: %s=%q is not a node label GPU Feature Discovery could have made (spaces as -, at most 63 characters); give its nodeSelector" .index $key $label) }}
{{- end }}
{{- dict $key $label | toJson }}
{{- end }}

{{/* The pre-warm Pod's annotations: the matrix's checksum (a changed list rolls the Pods), the trust policy's, and
under workload identity (IRSA) the containers the EKS webhook must leave without the role's token: all but the one
that pulls. */}}
{{- define "trtwarm.prewarmAnnotations" -}}
{{- $a := dict "checksum/matrix" (.matrix | sha256sum) }}
{{- with .ctx }}
{{- if and (include "trtwarm.trustEnabled" .) (not .Values.trust.existingConfigMap) }}
{{- $_ := set $a "checksum/trust" (include (print .Template.BasePath "/configmap-trust.yaml") . | sha256sum) }}
{{- end }}
{{- if not .Values.remote.credentials.secretName }}
{{- $skip := list "trtwarm-exporter" }}
{{- if .Values.cache.fixPermissions.enabled }}{{ $skip = append $skip "trtwarm-fix-permissions" }}{{ end }}
{{- $_ := set $a "eks.amazonaws.com/skip-containers" (join "," $skip) }}
{{- end }}
{{- end }}
{{- toYaml $a }}
{{- end }}

{{/* The `trtwarm prewarm` container of one GPU class (dict "ctx" . "gpu" <class>). */}}
{{- define "trtwarm.prewarmContainer" -}}
{{- $ := .ctx -}}
- name: trtwarm-prewarm
  image: {{ include "trtwarm.image" (dict "image" $.Values.remote.pullOnlyImage "ctx" $ "what" "remote.pullOnlyImage" "default" $.Chart.AppVersion) | quote }}
  imagePullPolicy: {{ $.Values.init.image.pullPolicy }}
  command:
    {{- toYaml (list "trtwarm" "prewarm" "--matrix=/etc/trtwarm/matrix/matrix.json" (printf "--cache-dir=%v" $.Values.cache.mountPath) (printf "--gpu-product=%s" .gpu.product) (printf "--gpu-compute-capability=%s" .gpu.computeCapability) (printf "--gpu-memory-gib=%s" .gpu.memoryGiB)) | nindent 4 }}
  env:
    {{- $base := concat (include "trtwarm.podEnv" $ | fromYamlArray) (list (dict "name" "TRTWARM_LOG_FORMAT" "value" (toString $.Values.init.logFormat))) }}
    {{- $base = append $base (dict "name" "TRTWARM_LOCK_MODE" "value" (toString $.Values.engine.lockMode)) }}
    {{- if include "trtwarm.trustEnabled" $ }}
    {{- $base = concat $base (list (dict "name" "TRTWARM_TRUST_POLICY" "value" "/etc/trtwarm/trust/policy.json") (dict "name" "TRTWARM_TRUST_MODE" "value" (toString $.Values.trust.mode))) }}
    {{- end }}
    {{- include "trtwarm.env" (dict "base" (concat $base (include "trtwarm.remoteEnv" $ | fromYamlArray)) "extra" ($.Values.init.env | default list)) | nindent 4 }}
  {{- include "trtwarm.remoteEnvFrom" $ | nindent 2 }}
  resources:
    {{- include "trtwarm.resources" $.Values.prewarm.resources | nindent 4 }}
  securityContext:
    {{- toYaml $.Values.init.securityContext | nindent 4 }}
  terminationMessagePolicy: FallbackToLogsOnError
  volumeMounts:
    {{- include "trtwarm.cacheMount" $ | nindent 4 }}
    - name: matrix
      mountPath: /etc/trtwarm/matrix
      readOnly: true
    - name: trtwarm-tmp
      mountPath: /tmp
    {{- include "trtwarm.registryAuthMount" $ | nindent 4 }}
    {{- if include "trtwarm.trustEnabled" $ }}
    - name: trtwarm-trust
      mountPath: /etc/trtwarm/trust
      readOnly: true
    {{- end }}
    {{- if $.Values.engine.model.volume }}
    - name: trtwarm-model
      mountPath: {{ $.Values.engine.model.mountPath | quote }}
      readOnly: true
    {{- end }}
{{- end }}

{{/* The exporter of a pre-warm Pod: what the node's cache holds, on `exporter.port` (no hand-off, no lease). */}}
{{- define "trtwarm.prewarmExporter" -}}
- name: trtwarm-exporter
  image: {{ include "trtwarm.image" (dict "image" .Values.exporter.image "ctx" . "what" "exporter.image" "default" .Chart.AppVersion) | quote }}
  imagePullPolicy: {{ .Values.exporter.image.pullPolicy }}
  command: ["trtwarm-sidecar"]
  args:
    - {{ printf "--cache-dir=%v" .Values.cache.mountPath | quote }}
    - --handoff-dir=/tmp/handoff
    - {{ printf "--port=%v" .Values.exporter.port | quote }}
    - {{ printf "--scan-interval=%v" .Values.exporter.scanInterval | quote }}
    - {{ printf "--lock-mode=%v" .Values.engine.lockMode | quote }}
  env:
    {{- include "trtwarm.env" (dict "base" (include "trtwarm.podEnv" . | fromYamlArray) "extra" (.Values.exporter.env | default list)) | nindent 4 }}
  ports:
    - name: trtwarm-metrics
      containerPort: {{ .Values.exporter.port }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: trtwarm-metrics
    periodSeconds: {{ .Values.exporter.livenessProbe.periodSeconds }}
    timeoutSeconds: {{ .Values.exporter.livenessProbe.timeoutSeconds }}
    failureThreshold: {{ .Values.exporter.livenessProbe.failureThreshold }}
  resources:
    {{- include "trtwarm.resources" .Values.exporter.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.exporter.securityContext | nindent 4 }}
  volumeMounts:
    {{- include "trtwarm.cacheMount" . | nindent 4 }}
      readOnly: true
    - name: trtwarm-tmp
      mountPath: /tmp
{{- end }}

{{/* The Pod spec of one GPU class's pre-warm DaemonSet (dict "ctx" . "gpu" <class> "config" "<ConfigMap>"). */}}
{{- define "trtwarm.prewarmPodSpec" -}}
{{- $ := .ctx -}}
automountServiceAccountToken: false
{{- with include "trtwarm.serviceAccountName" $ }}
serviceAccountName: {{ . | quote }}
{{- end }}
{{- with $.Values.workload.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.prewarm.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
securityContext:
  {{- toYaml $.Values.workload.podSecurityContext | nindent 2 }}
nodeSelector:
  {{- toYaml .gpu.nodeSelector | nindent 2 }}
{{- with $.Values.prewarm.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.prewarm.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
initContainers:
  {{- if $.Values.cache.fixPermissions.enabled }}
  {{- include "trtwarm.fixPermissionsContainer" $ | nindent 2 }}
  {{- end }}
  {{- include "trtwarm.prewarmContainer" . | nindent 2 }}
containers:
  {{- include "trtwarm.prewarmExporter" $ | nindent 2 }}
volumes:
  {{- include "trtwarm.cacheVolume" $ | nindent 2 }}
  - name: matrix
    configMap:
      name: {{ .config }}
  - name: trtwarm-tmp
    emptyDir: {}
  {{- include "trtwarm.registryAuthVolume" $ | nindent 2 }}
  {{- if include "trtwarm.trustEnabled" $ }}
  - name: trtwarm-trust
    configMap:
      name: {{ include "trtwarm.trustConfigMap" $ }}
  {{- end }}
  {{- with $.Values.engine.model.volume }}
  - name: trtwarm-model
    {{- include "trtwarm.readOnlyVolume" . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* Render-time refusals of a pre-warm that could not work, naming the values. */}}
{{- define "trtwarm.prewarmChecks" -}}
{{- $v := .Values }}
{{- if not $v.remote.url }}{{ fail "prewarm.enabled needs remote.url (the repository the engines are pulled from)" }}{{ end }}
{{- if ne $v.cache.type "hostPath" }}
{{- fail (printf "prewarm.enabled needs cache.type=hostPath (a node's own cache to fill), not %s" $v.cache.type) }}
{{- end }}
{{- $matrix := $v.prewarm.matrix | default $v.remote.prebuild.matrix }}
{{- if not $matrix }}{{ fail "prewarm.enabled needs prewarm.matrix (or remote.prebuild.matrix): the engines to pull onto every GPU node" }}{{ end }}
{{- if not $v.prewarm.gpus }}
{{- fail "prewarm.enabled needs prewarm.gpus: the cluster's GPU classes (product as NVML names it, computeCapability, memoryGiB), one pre-warm DaemonSet each, so that it keys as the Pods on those GPUs do without holding a GPU" }}
{{- end }}
{{- $builders := list (dig "options" "builder" "tensorrt" $matrix) }}
{{- range ($matrix.models | default list) }}{{ with .builder }}{{ $builders = append $builders . }}{{ end }}{{ end }}
{{- if has "onnxruntime" $builders }}
{{- fail "prewarm.matrix has onnxruntime rows: their key holds onnxruntime's version, which the pre-warm image (remote.pullOnlyImage: no GPU library, no onnxruntime) cannot read; leave them to the Pods" }}
{{- end }}
{{- if and (has "tensorrt" $builders) (not $v.remote.tensorrtVersion) }}
{{- fail "prewarm.matrix has tensorrt rows and remote.tensorrtVersion is empty: the pre-warm image has no TensorRT, so the key's version must be declared (the inference server's exact TensorRT, e.g. 10.16.1.11+cu12)" }}
{{- end }}
{{- end }}
