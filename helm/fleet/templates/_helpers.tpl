{{/* Names and labels. */}}
{{- define "fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: include "fleet.componentLabels" (list $ "worker") */}}
{{- define "fleet.componentLabels" -}}
{{ include "fleet.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "fleet.componentSelector" -}}
{{ include "fleet.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fleet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Secrets: the chart's own Secret holds the inline values. */}}
{{- define "fleet.hasInlineSecrets" -}}
{{- if or .Values.database.url .Values.database.migrate.url .Values.redis.url .Values.openai.apiKey }}true{{ end }}
{{- end }}

{{/* secretKeyRef for one of database / redis / openai: (list $ .Values.database "database-url") */}}
{{- define "fleet.secretKeyRef" -}}
{{- $root := index . 0 }}{{- $v := index . 1 }}{{- $key := index . 2 }}
{{- if $v.existingSecret -}}
name: {{ $v.existingSecret }}
key: {{ $v.existingSecretKey }}
{{- else -}}
{{- if and (include "fleet.hasInlineSecrets" $root) (not $v.url) (has $key (list "database-url" "redis-url")) }}
{{- fail (printf "%s is empty and %s.existingSecret is unset, but the chart's Secret holds only inline values: set one of them" (replace "-" "." $key) (first (splitList "-" $key))) }}
{{- end -}}
name: {{ include "fleet.fullname" $root }}
key: {{ $key }}
{{- end }}
{{- end }}

{{/* Environment shared by every container. */}}
{{- define "fleet.env" -}}
- name: FLEET_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- include "fleet.secretKeyRef" (list . .Values.database "database-url") | nindent 6 }}
{{- with .Values.database.pooler }}
- name: FLEET_DATABASE_POOLER
  value: {{ . | quote }}
{{- end }}
- name: FLEET_DATABASE_POOL_SIZE
  value: {{ .Values.database.poolSize | quote }}
{{- include "fleet.pgTlsEnv" . }}
- name: FLEET_REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- include "fleet.secretKeyRef" (list . .Values.redis "redis-url") | nindent 6 }}
{{- include "fleet.redisExtraEnv" . }}
{{- if or .Values.openai.apiKey .Values.openai.existingSecret }}
- name: FLEET_OPENAI_API_KEY
  valueFrom:
    secretKeyRef:
      {{- include "fleet.secretKeyRef" (list . .Values.openai "openai-api-key") | nindent 6 }}
{{- end }}
- name: FLEET_OPENAI_BASE_URL
  value: {{ .Values.openai.baseUrl | quote }}
- name: FLEET_CONFIG_DIR
  value: /etc/fleet/config
- name: FLEET_HOME
  value: /tmp/fleet
- name: FLEET_LEASE_TTL
  value: {{ .Values.settings.leaseTtl | quote }}
- name: FLEET_SWEEP_INTERVAL
  value: {{ .Values.settings.sweepInterval | quote }}
- name: FLEET_MAX_ATTEMPTS
  value: {{ .Values.settings.maxAttempts | quote }}
- name: FLEET_DRAIN_BUDGET
  value: {{ .Values.settings.drainBudget | quote }}
- name: FLEET_SHUTDOWN_GRACE
  value: {{ .Values.settings.shutdownGrace | quote }}
- name: FLEET_BUILD
  value: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
- name: FLEET_LOG_LEVEL
  value: {{ .Values.settings.logLevel | quote }}
- name: FLEET_LOG_FORMAT
  value: {{ .Values.settings.logFormat | quote }}
- name: FLEET_CELERY_EVENTS
  value: {{ .Values.settings.celeryEvents | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* libpq's TLS environment (database.tls): the mode, and the files of the mounted Secret. */}}
{{- define "fleet.pgTlsEnv" -}}
{{- $t := .Values.database.tls }}
{{- with $t.mode }}
- name: PGSSLMODE
  value: {{ . | quote }}
{{- end }}
{{- if $t.secretName }}
- name: PGSSLROOTCERT
  value: /etc/fleet/tls/postgres/{{ $t.caKey }}
{{- if and $t.certKey $t.keyKey }}
- name: PGSSLCERT
  value: /etc/fleet/tls/postgres/{{ $t.certKey }}
- name: PGSSLKEY
  value: /etc/fleet/tls/postgres/{{ $t.keyKey }}
{{- else if or $t.certKey $t.keyKey }}
{{- fail "database.tls: certKey and keyKey go together (a client certificate and its key)" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Redis: sentinels and TLS files (redis.sentinels, redis.tls). */}}
{{- define "fleet.redisExtraEnv" -}}
{{- $r := .Values.redis }}
{{- if $r.sentinels }}
{{- if not $r.sentinelMaster }}
{{- fail "redis.sentinelMaster is empty: with redis.sentinels, name the master they monitor" }}
{{- end }}
- name: FLEET_REDIS_SENTINELS
  value: {{ join "," $r.sentinels | quote }}
- name: FLEET_REDIS_SENTINEL_MASTER
  value: {{ $r.sentinelMaster | quote }}
{{- with $r.sentinelPassword.existingSecret }}
- name: FLEET_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $r.sentinelPassword.existingSecretKey }}
{{- end }}
{{- end }}
{{- $t := $r.tls }}
{{- if $t.secretName }}
- name: FLEET_REDIS_TLS_CA_FILE
  value: /etc/fleet/tls/redis/{{ $t.caKey }}
{{- if and $t.certKey $t.keyKey }}
- name: FLEET_REDIS_TLS_CERT_FILE
  value: /etc/fleet/tls/redis/{{ $t.certKey }}
- name: FLEET_REDIS_TLS_KEY_FILE
  value: /etc/fleet/tls/redis/{{ $t.keyKey }}
{{- else if or $t.certKey $t.keyKey }}
{{- fail "redis.tls: certKey and keyKey go together (a client certificate and its key)" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Secret volumes of TLS files: include "fleet.tlsVolumes" . (in a pod's volumes). */}}
{{- define "fleet.tlsVolumes" -}}
{{- range $name, $t := dict "postgres" .Values.database.tls "redis" .Values.redis.tls }}
{{- if $t.secretName }}
- name: tls-{{ $name }}
  secret:
    secretName: {{ $t.secretName }}
    # root-owned, group fsGroup: libpq accepts a private key readable by the group this way
    defaultMode: 0440
    items:
      - key: {{ $t.caKey }}
        path: {{ $t.caKey }}
      {{- if $t.certKey }}
      - key: {{ $t.certKey }}
        path: {{ $t.certKey }}
      {{- end }}
      {{- if $t.keyKey }}
      - key: {{ $t.keyKey }}
        path: {{ $t.keyKey }}
      {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fleet.tlsMounts" -}}
{{- range $name, $t := dict "postgres" .Values.database.tls "redis" .Values.redis.tls }}
{{- if $t.secretName }}
- name: tls-{{ $name }}
  mountPath: /etc/fleet/tls/{{ $name }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/* The migration hook's URL, when one is given: FLEET_MIGRATE_DATABASE_URL. */}}
{{- define "fleet.migrateEnv" -}}
{{- $m := .Values.database.migrate }}
{{- if or $m.url $m.existingSecret -}}
- name: FLEET_MIGRATE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- include "fleet.secretKeyRef" (list . $m "migrate-database-url") | nindent 6 }}
{{- end }}
{{- end }}

{{/* Container fields shared by every container: image, env, security, mounts.
     include "fleet.containerCommon" (list $ withConfig [migrate]) */}}
{{- define "fleet.containerCommon" -}}
{{- $withConfig := index . 1 }}
{{- $migrate := and (gt (len .) 2) (index . 2) }}
{{- with index . 0 -}}
image: {{ include "fleet.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
env:
  {{- include "fleet.env" . | nindent 2 }}
  {{- if $migrate }}
  {{- include "fleet.migrateEnv" . | nindent 2 }}
  {{- end }}
{{- with .Values.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- include "fleet.tlsMounts" . | nindent 2 }}
{{- if $withConfig }}
  - name: config
    mountPath: /etc/fleet/config
    readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{- define "fleet.configMapName" -}}
{{- default (printf "%s-config" (include "fleet.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{/* Pod fields shared by every pod: security, volumes, scheduling.
     include "fleet.podCommon" (list $ withConfig); the migration hook runs before the
     release's ConfigMap exists and does not read config/, so it mounts none. */}}
{{- define "fleet.podCommon" -}}
{{- $withConfig := index . 1 }}
{{- with index . 0 -}}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
  {{- include "fleet.tlsVolumes" . | nindent 2 }}
  {{- if $withConfig }}
  - name: config
    configMap:
      name: {{ include "fleet.configMapName" . }}
      items:
      {{- $paths := keys (.Values.config.files | default dict) | sortAlpha }}
      {{- if .Values.config.existingConfigMap }}
      {{- $paths = .Values.config.existingConfigMapFiles }}
      {{- end }}
      {{- if not $paths }}
      {{- fail "config: no files to mount; set config.files, or config.existingConfigMapFiles with config.existingConfigMap" }}
      {{- end }}
      {{- range $paths }}
        - key: {{ replace "/" "." . }}
          path: {{ . }}
      {{- end }}
  {{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/* Roll pods when config or inline secrets change. */}}
{{- define "fleet.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
