{{/* Trust: the policy (a ConfigMap) for every init, the signing key (a Secret) only in the builder role. */}}
{{- define "trtwarm.trustEnabled" -}}
{{- if ne .Values.trust.mode "off" }}true{{ end }}
{{- end }}

{{- define "trtwarm.trustSigns" -}}
{{- if and (eq .Values.trust.role "builder") .Values.trust.signingKey.existingSecret }}true{{ end }}
{{- end }}

{{- define "trtwarm.trustArgs" -}}
{{- if and (eq .Values.trust.mode "enforce") (eq .Values.trust.role "builder") (not .Values.trust.signingKey.existingSecret) }}
{{- fail "trust.mode=enforce with trust.role=builder needs trust.signingKey.existingSecret (a builder without a key would never build an entry it trusts); or set trust.role=consumer" }}
{{- end }}
{{- if eq .Values.trust.role "consumer" }}
{{- if .Values.engine.readOnly }}{{/* already --read-only */}}{{ else }}
- --read-only
{{- end }}
{{- end }}
{{- if include "trtwarm.trustEnabled" . }}
- --trust-policy=/etc/trtwarm/trust/policy.json
- --trust-mode={{ .Values.trust.mode }}
{{- end }}
{{- if include "trtwarm.trustSigns" . }}
- --signing-key=/etc/trtwarm/signing/{{ .Values.trust.signingKey.key }}
{{- end }}
{{- end }}

{{- define "trtwarm.trustMounts" -}}
{{- if include "trtwarm.trustEnabled" . }}
- name: trtwarm-trust
  mountPath: /etc/trtwarm/trust
  readOnly: true
{{- end }}
{{- if include "trtwarm.trustSigns" . }}
- name: trtwarm-signing
  mountPath: /etc/trtwarm/signing
  readOnly: true
{{- end }}
{{- end }}

{{- define "trtwarm.trustVolumes" -}}
{{- if include "trtwarm.trustEnabled" . }}
- name: trtwarm-trust
  configMap:
    name: {{ include "trtwarm.trustConfigMap" . }}
{{- end }}
{{- if include "trtwarm.trustSigns" . }}
- name: trtwarm-signing
  secret:
    secretName: {{ .Values.trust.signingKey.existingSecret | quote }}
    defaultMode: 0440  # owner and the fsGroup (the init runs as a non-root uid)
{{- end }}
{{- end }}

{{- define "trtwarm.trustConfigMap" -}}
{{- .Values.trust.existingConfigMap | default (include "trtwarm.nameWithSuffix" (dict "ctx" . "suffix" "trust" "max" 63)) }}
{{- end }}
