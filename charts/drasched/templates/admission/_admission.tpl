{{/*
What the two admission policies of config/admission share, so that the chart
states each rule once: the variables that decide whether a pod uses DRA
devices and which scheduler must take it, and the namespaces a cluster admin
exempts.
*/}}

{{/*
The extended resource names of DeviceClasses, as a JSON list: those of the
classes the chart installs (gpuDriver.deviceClasses.extendedResourceNames,
the values that set the classes' spec.extendedResourceName) and
admission.extendedResourceNames, for classes installed otherwise.
*/}}
{{- define "drasched.admission.extendedResourceNames" -}}
{{- $names := include "drasched.deviceClasses.extendedResourceNames" . | fromJsonArray }}
{{- toJson (concat $names .Values.admission.extendedResourceNames | uniq) }}
{{- end }}

{{- define "drasched.admission.variables" -}}
# The scheduler name of drasched's profile (config/scheduler-config.yaml).
- name: schedulerName
  expression: >-
    {{ .Values.scheduler.schedulerName | quote }}
# Extended resource names that DeviceClasses served by drasched map to
# (spec.extendedResourceName), such as "nvidia.com/gpu".
- name: extendedResourceNames
  expression: >-
    {{ include "drasched.admission.extendedResourceNames" . }}
- name: usesDRA
  expression: >-
    (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) ||
    (object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c,
      has(c.resources) && (
        (has(c.resources.requests) && c.resources.requests.exists(r,
          r.startsWith("deviceclass.resource.kubernetes.io/") || r in variables.extendedResourceNames)) ||
        (has(c.resources.limits) && c.resources.limits.exists(r,
          r.startsWith("deviceclass.resource.kubernetes.io/") || r in variables.extendedResourceNames))))
{{- end }}

{{/*
The bindings' namespaceSelector: every namespace but those a cluster admin
labelled drasched.dev/routing: disabled. Never an objectSelector: anyone who
may create a pod may label it.
*/}}
{{- define "drasched.admission.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
  - key: drasched.dev/routing
    operator: NotIn
    values: ["disabled"]
{{- end }}
