{{/*
Every helper takes the writeback chart's own context: "." in this chart's
templates, or .Subcharts.writeback when a parent chart includes the sidecar
(mode inject), e.g.
  {{- include "writeback.sidecar" .Subcharts.writeback | nindent 8 }}
*/}}

{{- define "writeback.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" }}
{{- end }}

{{/* Full name; at most 50 characters so that suffixes fit in 63. */}}
{{- define "writeback.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := include "writeback.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "writeback.configMapName" -}}
{{- printf "%s-config" (include "writeback.fullname" .) }}
{{- end }}

{{- define "writeback.appName" -}}
{{- default .Release.Name .Values.app.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "writeback.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "writeback.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels of every pod running writeback (sidecars and appliers): the metrics Service selects them. */}}
{{- define "writeback.instanceLabel" -}}
writeback/instance: {{ include "writeback.fullname" . }}
{{- end }}

{{/* Labels to add to the pod template of an app that carries the sidecar. */}}
{{- define "writeback.podLabels" -}}
{{ include "writeback.instanceLabel" . }}
writeback/role: sidecar
{{- end }}

{{/* Annotations to add to the pod template of an app that carries the sidecar: rolls the pods when writeback.yaml changes. */}}
{{- define "writeback.podAnnotations" -}}
checksum/writeback-config: {{ include "writeback.config" . | sha256sum }}
{{- end }}

{{- define "writeback.appliersSelectorLabels" -}}
app.kubernetes.io/name: {{ include "writeback.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: appliers
{{- end }}

{{- define "writeback.appSelectorLabels" -}}
app.kubernetes.io/name: {{ include "writeback.appName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: app
{{- end }}

{{- define "writeback.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The environment variable that carries a store's DSN: WRITEBACK_STORE_<NAME>_DSN. */}}
{{- define "writeback.dsnEnvName" -}}
{{- printf "WRITEBACK_STORE_%s_DSN" (. | upper | replace "-" "_") }}
{{- end }}

{{- define "writeback.listen" -}}
{{- .Values.sidecar.listen | default (printf ":%d" (int .Values.sidecar.port)) }}
{{- end }}

{{/*
writeback.yaml. Secrets never appear here: the Redis password and the API
token come from WRITEBACK_REDIS_PASSWORD and WRITEBACK_AUTH_TOKEN, and every
store names the env var holding its DSN with dsnEnv.
*/}}
{{- define "writeback.config" -}}
{{- $v := .Values }}
{{- $redis := omit $v.redis "passwordSecret" }}
{{- range $k := list "masterName" "username" }}
{{- if not (get $redis $k) }}{{ $_ := unset $redis $k }}{{ end }}
{{- end }}
{{- $stores := dict }}
{{- range $name, $s := $v.stores }}
{{- $e := omit $s "dsnSecret" }}
{{- $_ := set $e "dsnEnv" (include "writeback.dsnEnvName" $name) }}
{{- $_ := set $stores $name $e }}
{{- end }}
{{- range $name, $c := $v.collections }}
{{- if not (hasKey $v.stores $c.store) }}
{{- fail (printf "collections.%s.store: %q is not one of the stores (%s); add it under stores or fix the name" $name $c.store (keys $v.stores | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- $cfg := dict "listen" (include "writeback.listen" .) "redis" $redis "stores" $stores "collections" $v.collections "log" $v.log }}
{{- if not (include "writeback.tokenRef" . | fromJson).secretName }}
{{- if not $v.auth.allowUnauthenticated }}
{{- fail "auth: the sidecar listens on the pod network and has no API token; keep auth.generate: true, name an existing Secret with auth.tokenSecret, or set auth.allowUnauthenticated: true to accept the risk" }}
{{- end }}
{{- $_ := set $cfg "auth" (dict "allowUnauthenticated" true) }}
{{- end }}
{{- with $v.writeback }}{{ $_ := set $cfg "writeback" . }}{{ end }}
{{- with $v.limits }}{{ $_ := set $cfg "limits" . }}{{ end }}
{{- with $v.queues }}{{ $_ := set $cfg "queues" . }}{{ end }}
{{- with $v.mappings }}{{ $_ := set $cfg "mappings" . }}{{ end }}
# writeback.yaml, rendered by the writeback Helm chart (release {{ .Release.Name }}).
# Secrets are not in this file: see dsnEnv, WRITEBACK_REDIS_PASSWORD and WRITEBACK_AUTH_TOKEN.
{{ toYaml $cfg }}
{{- end }}

{{/* The Secret the chart generates for the API tokens when auth.tokenSecret names none. */}}
{{- define "writeback.authSecretName" -}}
{{- printf "%s-auth" (include "writeback.fullname" .) }}
{{- end }}

{{/* Whether the chart generates that Secret. */}}
{{- define "writeback.authGenerated" -}}
{{- if and (not (.Values.auth.tokenSecret | default dict).secretName) .Values.auth.generate }}true{{ end }}
{{- end }}

{{/* Where the API token comes from: {secretName, secretKey}, or {} when there is none. */}}
{{- define "writeback.tokenRef" -}}
{{- if (.Values.auth.tokenSecret | default dict).secretName }}
{{- toJson .Values.auth.tokenSecret }}
{{- else if include "writeback.authGenerated" . }}
{{- toJson (dict "secretName" (include "writeback.authSecretName" .) "secretKey" "token") }}
{{- else }}{}
{{- end }}
{{- end }}

{{/* Where the admin token comes from: {secretName, secretKey}, or {} when there is none. */}}
{{- define "writeback.adminTokenRef" -}}
{{- if (.Values.auth.adminTokenSecret | default dict).secretName }}
{{- toJson .Values.auth.adminTokenSecret }}
{{- else if and (include "writeback.authGenerated" .) .Values.auth.generateAdminToken }}
{{- toJson (dict "secretName" (include "writeback.authSecretName" .) "secretKey" "adminToken") }}
{{- else }}{}
{{- end }}
{{- end }}

{{/* Env vars read from existing Secrets (never inline values). */}}
{{- define "writeback.secretEnv" -}}
{{- with .Values.redis.passwordSecret }}
{{- if .secretName }}
- name: WRITEBACK_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .secretName | quote }}
      key: {{ .secretKey | quote }}
{{- end }}
{{- end }}
{{- with include "writeback.tokenRef" . | fromJson }}
{{- if .secretName }}
- name: WRITEBACK_AUTH_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .secretName | quote }}
      key: {{ .secretKey | quote }}
{{- end }}
{{- end }}
{{- with include "writeback.adminTokenRef" . | fromJson }}
{{- if .secretName }}
- name: WRITEBACK_AUTH_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .secretName | quote }}
      key: {{ .secretKey | quote }}
{{- end }}
{{- end }}
{{- range $name, $s := .Values.stores }}
- name: {{ include "writeback.dsnEnvName" $name }}
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "stores.%s.dsnSecret.secretName is required: name the existing Secret that holds the DSN" $name) $s.dsnSecret.secretName | quote }}
      key: {{ required (printf "stores.%s.dsnSecret.secretKey is required: name the key of the Secret that holds the DSN" $name) $s.dsnSecret.secretKey | quote }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds: preStop sleep + the sidecar's 10 s shutdown + 15 s margin, unless set. */}}
{{- define "writeback.terminationGracePeriodSeconds" -}}
{{- $min := add (int .Values.preStop.sleepSeconds) 10 }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $min 15 }}
{{- else if lt (int .Values.terminationGracePeriodSeconds) (int $min) }}
{{- fail (printf "terminationGracePeriodSeconds: %d is shorter than preStop.sleepSeconds (%d) + the sidecar's 10 s shutdown; use at least %d, or null to compute it" (int .Values.terminationGracePeriodSeconds) (int .Values.preStop.sleepSeconds) (int $min)) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{- define "writeback.lifecycle" -}}
{{- if gt (int .Values.preStop.sleepSeconds) 0 }}
lifecycle:
  preStop:
    sleep:
      seconds: {{ int .Values.preStop.sleepSeconds }}
{{- end }}
{{- end }}

{{- define "writeback.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: wb-http}
  {{- toYaml .Values.sidecar.startupProbe | nindent 2 }}
livenessProbe:
  httpGet: {path: /healthz, port: wb-http}
  {{- toYaml .Values.sidecar.livenessProbe | nindent 2 }}
readinessProbe:
  httpGet: {path: /readyz, port: wb-http}
  {{- toYaml .Values.sidecar.readinessProbe | nindent 2 }}
{{- end }}

{{/*
GOMEMLIMIT from the writeback container's memory limit, when its resources
(the argument) set one: the Go runtime then collects harder as its memory
nears the limit instead of being killed there (gcHeapFloor only lets the
heap grow to 64 MiB before the collector runs). An env entry of the same
name in sidecar.env or appliers.env, which comes after, overrides it.
*/}}
{{- define "writeback.memoryLimitEnv" -}}
{{- if dig "limits" "memory" "" (. | default dict) }}
- name: GOMEMLIMIT
  valueFrom:
    resourceFieldRef:
      containerName: writeback
      resource: limits.memory
{{- end }}
{{- end }}

{{/*
The sidecar container, as one item of a containers list (or of
initContainers, with sidecar.native). Needs the volumes of
"writeback.volumes" in the pod.
*/}}
{{- define "writeback.sidecar" -}}
- name: writeback
  image: {{ include "writeback.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: [serve, --config, /etc/writeback/writeback.yaml]
  {{- if .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  ports:
    - name: wb-http
      containerPort: {{ int .Values.sidecar.port }}
      protocol: TCP
  env:
    {{- include "writeback.secretEnv" . | trim | nindent 4 }}
    {{- with .Values.sidecar.workers }}
    - name: WRITEBACK_WORKERS
      value: {{ int . | quote }}
    {{- end }}
    {{- with .Values.sidecar.respSocket }}
    - name: WRITEBACK_LISTEN_RESP
      value: {{ printf "unix:%s" . | quote }}
    - name: WRITEBACK_RESP_SOCKET_MODE
      value: "0666"
    {{- end }}
    {{- with include "writeback.memoryLimitEnv" .Values.sidecar.resources | trim }}{{ . | nindent 4 }}{{ end }}
    {{- with .Values.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- include "writeback.probes" . | nindent 2 }}
  {{- with include "writeback.lifecycle" . | trim }}{{ . | nindent 2 }}{{ end }}
  {{- with .Values.sidecar.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: writeback-config
      mountPath: /etc/writeback
      readOnly: true
    {{- with .Values.sidecar.respSocket }}
    - name: writeback-run
      mountPath: {{ dir . | quote }}
    {{- end }}
{{- end }}

{{/* The pod volumes the sidecar needs, as items of a volumes list: its
configuration and, with sidecar.respSocket, the directory of its socket. */}}
{{- define "writeback.volumes" -}}
{{ include "writeback.configVolume" . }}
{{- if .Values.sidecar.respSocket }}
- name: writeback-run
  emptyDir: {}
{{- end }}
{{- end }}

{{/* The configuration's volume alone (the standalone appliers serve no socket). */}}
{{- define "writeback.configVolume" -}}
- name: writeback-config
  configMap:
    name: {{ include "writeback.configMapName" . }}
{{- end }}
