{{/* Labels every object carries (the Kustomize base's, plus Helm's). */}}
{{- define "causeway.labels" -}}
app.kubernetes.io/part-of: causeway
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image reference. */}}
{{- define "causeway.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* agent.toml: the value, else files/agent.toml, plus [otlp] when enabled. */}}
{{- define "causeway.agentConfig" -}}
{{- $config := .Values.agent.config | default (.Files.Get "files/agent.toml") -}}
{{- if not $config -}}
{{- fail "files/agent.toml is missing from the chart (a link to deploy/kubernetes/base/agent.toml) and agent.config is empty" -}}
{{- end -}}
{{- $config -}}
{{- if .Values.agent.otlp.enabled }}

[otlp]
endpoint = {{ .Values.agent.otlp.endpoint | default (printf "http://causeway-collect.%s.svc:4318" .Release.Namespace) | quote }}
protocol = {{ .Values.agent.otlp.protocol | quote }}
interval = {{ .Values.agent.otlp.interval | quote }}
token_file = "/etc/causeway/collect-token"
{{- end }}
{{- end -}}
