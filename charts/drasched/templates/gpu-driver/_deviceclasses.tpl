{{/*
The DeviceClasses of config/gpu-driver/deviceclasses.yaml, as a JSON list
of {name, type}: the one source of templates/gpu-driver/deviceclasses.yaml,
which renders them, and of the admission policies, which take their
extended resource names (gpuDriver.deviceClasses.extendedResourceNames).
values.schema.json lists the same names as the keys that value accepts.
*/}}
{{- define "drasched.deviceClasses" -}}
[{"name": "gpu.drasched.dev", "type": "gpu"}, {"name": "mig.gpu.drasched.dev", "type": "mig"}]
{{- end }}

{{/*
The extended resource names of the DeviceClasses the chart installs, as a
JSON list in the classes' order; it fails when two classes would share a
name, which would leave the API server to pick one of them.
*/}}
{{- define "drasched.deviceClasses.extendedResourceNames" -}}
{{- $names := list }}
{{- if and .Values.gpuDriver.enabled .Values.gpuDriver.deviceClasses.enabled }}
{{- $byClass := .Values.gpuDriver.deviceClasses.extendedResourceNames | default dict }}
{{- range $class := include "drasched.deviceClasses" . | fromJsonArray }}
{{- with get $byClass $class.name }}
{{- if has . $names }}
{{- fail (printf "gpuDriver.deviceClasses.extendedResourceNames: %s is given to more than one DeviceClass" .) }}
{{- end }}
{{- $names = append $names . }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end }}
