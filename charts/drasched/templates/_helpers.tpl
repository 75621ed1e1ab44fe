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

{{/*
The Kubernetes minors that drasched builds a scheduler for (hack/minor/*
and go.mod's; hack/helm's TestChartMinors checks).
*/}}
{{- define "drasched.schedulerBuilds" -}}
1.35 1.36 1.37
{{- end }}

{{/*
The Kubernetes minor of the scheduler's build: scheduler.kubeMinor, or the
build for the cluster's minor, the newest build for a newer cluster.
Upstream's skew policy lets kube-scheduler talk to an API server of its own
minor or one newer: any other pairing fails the install.
*/}}
{{- define "drasched.schedulerMinor" -}}
{{- $builds := splitList " " (include "drasched.schedulerBuilds" .) }}
{{- $cluster := printf "%s.%s" .Capabilities.KubeVersion.Major (regexFind "^[0-9]+" .Capabilities.KubeVersion.Minor) }}
{{- $minor := .Values.scheduler.kubeMinor | default "" }}
{{- if not $minor }}
{{- $minor = last $builds }}
{{- range $builds }}
{{- if eq . $cluster }}{{ $minor = . }}{{ end }}
{{- end }}
{{- end }}
{{- if not (has $minor $builds) }}
{{- fail (printf "scheduler.kubeMinor=%s: drasched builds a scheduler for Kubernetes %s" $minor (join ", " $builds)) }}
{{- end }}
{{- $next := printf "1.%d" (add1 (int (last (splitList "." $minor)))) }}
{{- if not (or (eq $cluster $minor) (eq $cluster $next)) }}
{{- fail (printf "the scheduler built for Kubernetes %s may not talk to this cluster's API server (%s): upstream's version skew policy allows kube-scheduler of the API server's minor or one minor older (docs/compatibility.md)" $minor .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $minor }}
{{- end }}

{{/* The scheduler's image: its tag names the minor of its build. */}}
{{- define "drasched.schedulerImage" -}}
{{ .Values.scheduler.image.repository }}:{{ .Values.scheduler.image.tag | default (printf "%s-k8s%s" .Chart.AppVersion (include "drasched.schedulerMinor" .)) }}
{{- end }}

{{/* The value of --feature-gates from a map: Name=bool, sorted by name. */}}
{{- define "drasched.featureGates" -}}
{{- $gates := list }}
{{- range $name, $on := . }}
{{- $gates = append $gates (printf "%s=%t" $name $on) }}
{{- end }}
{{- join "," $gates }}
{{- end }}
