{{/*
Labels that the chart adds to every object's metadata beyond those of
config/: Helm's own, and commonLabels. Selectors do not carry them, so that
objects applied with `kubectl apply -k config/...` can be taken over.
*/}}
{{- define "drasched.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
An image reference from {repository, tag}; the tag defaults to the chart's
appVersion, which is the tag `make images` builds. Call with
(dict "image" .Values.scheduler.image "root" $).
*/}}
{{- define "drasched.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end }}

{{/* The value of --feature-gates from a map: Name=bool, sorted by name. */}}
{{- define "drasched.featureGates" -}}
{{- $gates := list }}
{{- range $name, $on := . }}
{{- $gates = append $gates (printf "%s=%t" $name $on) }}
{{- end }}
{{- join "," $gates }}
{{- end }}
