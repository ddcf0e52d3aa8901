{{/* Engine images (issue 30): a read-only lower tier of the cache, `--seed-cache <mountPath>/cache`, mounted as an
image volume, or copied by the engine image's own init container where image volumes are not available. */}}

{{- define "trtwarm.enginesChecks" -}}
{{- $i := .Values.engines.image -}}
{{- if and $i.reference (eq $i.mode "volume") (semverCompare "<1.31.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail "engines.image.mode=volume needs image volumes (Kubernetes 1.31+ with the ImageVolume feature gate; on by default from 1.35); set engines.image.mode=copy on older clusters" }}
{{- end }}
{{- if and $i.reference (or (eq (clean $i.mountPath) (clean .Values.cache.mountPath)) (eq (clean $i.mountPath) (clean .Values.handoff.mountPath))) }}
{{- fail "engines.image.mountPath must differ from cache.mountPath and handoff.mountPath: the engine image is a separate, read-only tier" }}
{{- end }}
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
    reference: {{ $i.reference | quote }}
    pullPolicy: {{ $i.pullPolicy }}
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
  image: {{ $i.copyImage | quote }}
  imagePullPolicy: IfNotPresent
  command: ["cp", "/bin/busybox", "/trtwarm-tools/busybox"]
  resources:
    {{- toYaml .Values.exporter.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.init.securityContext | nindent 4 }}
  volumeMounts:
    - name: trtwarm-engines-tools
      mountPath: /trtwarm-tools
- name: trtwarm-engines-copy
  image: {{ $i.reference | quote }}
  imagePullPolicy: {{ $i.pullPolicy }}
  command: ["/trtwarm-tools/busybox", "cp", "-R", "/cache", {{ printf "%s/" $i.mountPath | quote }}]
  resources:
    {{- toYaml .Values.exporter.resources | nindent 4 }}
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
