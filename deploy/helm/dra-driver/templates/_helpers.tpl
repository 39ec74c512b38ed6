{{/*
Names and labels shared by the templates. Every template lives in a subdirectory of
templates/ named after the deploy/ file its default rendering goes to
(templates/driver/*.yaml: deploy/driver.yaml); `make manifests` relies on that.
*/}}

{{/* The name of the chart's objects: fullnameOverride, else the release name (plus
"-dra-driver" unless it has it already). */}}
{{- define "dra-driver.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the driver pods of this release. */}}
{{- define "dra-driver.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. Helm adds app.kubernetes.io/managed-by and its release
annotations itself when it installs; the rendered defaults (deploy/*.yaml) are also
applied with kubectl, so the chart does not claim them. */}}
{{- define "dra-driver.labels" -}}
{{ include "dra-driver.selectorLabels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "dra-driver.serviceAccountName" -}}
{{- default (include "dra-driver.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The user name the API server gives the driver's ServiceAccount tokens. */}}
{{- define "dra-driver.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "dra-driver.serviceAccountName" . }}
{{- end -}}

{{/* The environment variable of a `dra-driver run` flag given as its values key:
virtualParents (--virtual-parents) is DRA_VIRTUAL_PARENTS (dradriver/settings.py). */}}
{{- define "dra-driver.envName" -}}
DRA_{{ . | snakecase | upper }}
{{- end -}}

{{/* The pattern of a macvlan's macAddress in the config policies: a locally administered
address, or one of settings.macvlanGlobalMacs in any case, as the driver's
--macvlan-global-macs makes it (dradriver/contract/macs.py local_or; values.schema.json
checks each entry's form). Only hex digits, colons and pattern syntax: no CEL escaping. */}}
{{- define "dra-driver.macvlanMacPattern" -}}
{{- $local := "[0-9A-Fa-f][26AaEe](:[0-9A-Fa-f]{2}){5}" -}}
{{- $macs := list -}}
{{- range .Values.settings.macvlanGlobalMacs -}}
{{- $macs = append $macs (lower (trim .)) -}}
{{- end -}}
{{- if $macs -}}
^(?:{{ $local }}|(?i:{{ join "|" (uniq $macs) }}))$
{{- else -}}
^{{ $local }}$
{{- end -}}
{{- end -}}

{{/* settings.cniPlugins as a CEL list of strings (the admission policy's). */}}
{{- define "dra-driver.celCniPlugins" -}}
[{{ range $i, $p := .Values.settings.cniPlugins }}{{ if $i }}, {{ end }}'{{ include "dra-driver.celStringContent" (toString $p) }}'{{ end }}]
{{- end -}}

{{/* A string as the content of a single-quoted CEL string literal, escaped as
dradriver/admission/cel.py's lit() escapes it (the config policies are its output). */}}
{{- define "dra-driver.celStringContent" -}}
{{- . | replace "\\" "\\\\" | replace "'" "\\'" | replace "\n" "\\n" | replace "\r" "\\r" | replace "\t" "\\t" -}}
{{- end -}}

{{/* A string as the content of a YAML double-quoted string (JSON's escapes are
YAML's). */}}
{{- define "dra-driver.yamlQuotedContent" -}}
{{- . | toJson | trimPrefix "\"" | trimSuffix "\"" -}}
{{- end -}}

{{/* The TCP port of settings.metricsAddr (host:port, values.schema.json checks its
form); fails naming the values when it is empty. */}}
{{- define "dra-driver.metricsPort" -}}
{{- if not .Values.settings.metricsAddr -}}
{{- fail "metrics.scrapeAnnotations and metrics.serviceMonitor.enabled need settings.metricsAddr (e.g. \":9400\"): the driver serves no metrics without it" -}}
{{- end -}}
{{- regexFind "[0-9]+$" .Values.settings.metricsAddr -}}
{{- end -}}

{{/* Checks across values that values.schema.json cannot express. */}}
{{- define "dra-driver.validate" -}}
{{- if and (eq .Release.Namespace "default") (not .Values.allowDefaultNamespace) -}}
{{- fail "the release namespace is \"default\": install with --namespace (e.g. dra-system, see deploy/namespace.yaml), or set allowDefaultNamespace=true" -}}
{{- end -}}
{{- end -}}
