{{/* Engine images: a read-only lower tier of the cache, `--seed-cache <mountPath>/cache`, mounted as an image volume,
or copied by the engine image's own init container where image volumes are not available. */}}

{{/* Image volumes render only where the API server keeps them: it silently drops `volumes[].image` (and the mounts
that name it) while the ImageVolume feature gate is off, which it is by default before 1.35 (alpha 1.31-1.32, beta
off by default 1.33-1.34, on by default 1.35, GA 1.36). On 1.33-1.34 the user may state the gate is on; 1.31-1.32's
alpha is refused outright (the `restricted` Pod Security level admits image volumes only from 1.33). */}}
{{- define "trtwarm.enginesChecks" -}}
{{- $i := .Values.engines.image -}}
{{- if and $i.reference (eq $i.mode "volume") (semverCompare "<1.35.0-0" .Capabilities.KubeVersion.Version) }}
{{- $v := .Capabilities.KubeVersion.Version }}
{{- if semverCompare "<1.33.0-0" $v }}
{{- fail (printf "engines.image.mode=volume needs Kubernetes 1.35 or newer (1.33-1.34 with the ImageVolume feature gate on); this cluster is %s, where the API server would drop the image volume: set engines.image.mode=copy" $v) }}
{{- else if not $i.imageVolumeFeatureGate }}
{{- fail (printf "engines.image.mode=volume on Kubernetes %s: the ImageVolume feature gate is off by default before 1.35, and the API server then silently drops the image volume and its mounts (the init finds no seed tier and the Pod crash-loops); set engines.image.imageVolumeFeatureGate=true only if the gate is on for the API server and every kubelet, else engines.image.mode=copy" $v) }}
{{- end }}
{{- end }}
{{- if $i.reference }}{{ include "trtwarm.checkEnginesMount" . }}{{ end }}
{{- end }}

{{/* The engine image's mount must not overlap (be, contain or lie inside) another mount of trtwarm init or the
server: two mounts at one path are refused by the API server, a mount over the cache or the hand-off hides it (or
is hidden), and one inside the hand-off is where the init writes. Nor a path the image or the kubelet own. */}}
{{- define "trtwarm.checkEnginesMount" -}}
{{- $v := .Values }}
{{- $p := clean $v.engines.image.mountPath }}
{{- $others := dict "cache.mountPath" $v.cache.mountPath "handoff.mountPath" $v.handoff.mountPath "the Triton repository" (printf "%s/triton" $v.handoff.mountPath) "trtwarm init's /tmp" "/tmp" "the stamps directory" "/var/lib/trtwarm-stamps" "the trust policy, signing key and registry credentials" "/etc/trtwarm" }}
{{- if $v.engine.model.volume }}{{ $_ := set $others "engine.model.mountPath" $v.engine.model.mountPath }}{{ end }}
{{- /* the model file itself: without a model volume it is in the init image (or a volume of the user's), which a
mount over its directory would hide */}}
{{- $_ := set $others "engine.model.path" $v.engine.model.path }}
{{- if eq $v.engines.image.mode "copy" }}{{ $_ := set $others "copy mode's tools directory" "/trtwarm-tools" }}{{ end }}
{{- range $i, $m := ($v.workload.container.volumeMounts | default list) }}{{ $_ := set $others (printf "workload.container.volumeMounts[%d]" $i) (toString $m.mountPath) }}{{ end }}
{{- range $what := keys $others | sortAlpha }}
{{- $o := clean (get $others $what) }}
{{- if or (eq $p $o) (hasPrefix (printf "%s/" (trimSuffix "/" $p)) $o) (hasPrefix (printf "%s/" (trimSuffix "/" $o)) $p) }}
{{- fail (printf "engines.image.mountPath=%q overlaps %s (%s): the engine image needs a directory of its own, e.g. /trtwarm-engines" $v.engines.image.mountPath $what $o) }}
{{- end }}
{{- end }}
{{- /* and nothing under the trees the images own either: the init's venv is /opt/trtwarm, Triton's /opt/tritonserver,
the CA certificates the store's TLS needs /etc/ssl */}}
{{- include "trtwarm.checkOwnedPath" (dict "what" "engines.image.mountPath" "path" $v.engines.image.mountPath "images" true "hint" "/trtwarm-engines") }}
{{- end }}

{{/* The engine image's reference (through `global.imageRegistry`) and pull policy: a tag moves with every push, so
it is pulled unless `Never`; a digest takes the value, `IfNotPresent` by default. */}}
{{- define "trtwarm.enginesImage" -}}
{{- $i := .Values.engines.image -}}
{{- include "trtwarm.withRegistry" (dict "ref" $i.reference "registry" (.Values.global | default dict).imageRegistry) }}
{{- end }}

{{- define "trtwarm.enginesPullPolicy" -}}
{{- $i := .Values.engines.image -}}
{{- if eq (toString $i.pullPolicy) "Never" }}Never
{{- else if contains "@sha256:" $i.reference }}{{ $i.pullPolicy | default "IfNotPresent" }}
{{- else }}Always{{ end }}
{{- end }}

{{/* The volumes of the engine image: an image volume, or (copy) the emptyDir its tree is copied into and the one
that carries a static cp. */}}
{{- define "trtwarm.enginesVolumes" -}}
{{- $i := .Values.engines.image -}}
{{- include "trtwarm.enginesChecks" . }}
{{- if $i.reference }}
{{- if eq $i.mode "volume" }}
- name: trtwarm-engines
  image:
    reference: {{ include "trtwarm.enginesImage" . | quote }}
    pullPolicy: {{ include "trtwarm.enginesPullPolicy" . }}
{{- else }}
- name: trtwarm-engines
  emptyDir:
    sizeLimit: {{ $i.sizeLimit | quote }}
- name: trtwarm-engines-tools
  emptyDir:
    sizeLimit: 16Mi
{{- end }}
{{- end }}
{{- end }}

{{/* copy mode: busybox puts its static binary on an emptyDir, then the engine image (which holds no programs) runs
it to copy its `cache/` tree into the Pod-private emptyDir that trtwarm init reads as a seed tier. trtwarm init
verifies every entry it takes from there (digests; the signature under a trust.mode), as from an image volume. */}}
{{- define "trtwarm.enginesCopyContainers" -}}
{{- $i := .Values.engines.image -}}
{{- if and $i.reference (eq $i.mode "copy") }}
- name: trtwarm-engines-tools
  image: {{ include "trtwarm.withRegistry" (dict "ref" $i.copyImage "registry" (.Values.global | default dict).imageRegistry) | quote }}
  imagePullPolicy: IfNotPresent
  command: ["cp", "/bin/busybox", "/trtwarm-tools/busybox"]
  resources:
    {{- include "trtwarm.resources" .Values.exporter.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.init.securityContext | nindent 4 }}
  volumeMounts:
    - name: trtwarm-engines-tools
      mountPath: /trtwarm-tools
- name: trtwarm-engines-copy
  image: {{ include "trtwarm.enginesImage" . | quote }}
  imagePullPolicy: {{ include "trtwarm.enginesPullPolicy" . }}
  command: ["/trtwarm-tools/busybox", "cp", "-R", "/cache", {{ printf "%s/" $i.mountPath | quote }}]
  resources:
    {{- include "trtwarm.resources" .Values.exporter.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.init.securityContext | nindent 4 }}
  volumeMounts:
    - name: trtwarm-engines-tools
      mountPath: /trtwarm-tools
      readOnly: true
    - name: trtwarm-engines
      mountPath: {{ $i.mountPath | quote }}
{{- end }}
{{- end }}
