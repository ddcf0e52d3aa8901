{{/* The trtwarm-exporter sidecar (metrics, readiness, the Pod's lease, periodic gc) and what scrapes it. */}}

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
    {{- include "trtwarm.resources" .Values.exporter.resources | nindent 4 }}
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
