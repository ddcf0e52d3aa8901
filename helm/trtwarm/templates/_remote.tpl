{{/* The central engine repository (remote.*): its environment and credentials, and the prebuild Jobs' Pods. */}}

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
{{- include "trtwarm.resources" $res }}
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
