{{/*
A `fleet serve` Deployment and its Service, for a component whose values hold replicas,
resources, podAnnotations and service (type, port): the api, and the optional events processes
(task event streams only). Probes are the api's for both. Call with (list . "api" .Values.api).
*/}}
{{- define "fleet.serveDeployment" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $values := index . 2 -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "fleet.fullname" $ }}-{{ $component }}
  labels:
    {{- include "fleet.componentLabels" (list $ $component) | nindent 4 }}
spec:
  replicas: {{ $values.replicas }}
  selector:
    matchLabels:
      {{- include "fleet.componentSelector" (list $ $component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "fleet.componentLabels" (list $ $component) | nindent 8 }}
        {{- with $.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- include "fleet.checksums" $ | nindent 8 }}
        {{- with $values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "fleet.serviceAccountName" $ }}
      {{- include "fleet.podCommon" (list $ true) | nindent 6 }}
      containers:
        - name: {{ $component }}
          {{- $metricsPort := int $.Values.api.metricsPort }}
          command: [fleet, serve, --host, 0.0.0.0, --port, "8080"{{ if $metricsPort }}, --metrics-port, {{ $metricsPort | quote }}{{ end }}]
          {{- include "fleet.containerCommon" (list $ true) | nindent 10 }}
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
            {{- if $metricsPort }}
            # /metrics without a key, for Prometheus (a PodMonitor on this port); no Service
            # routes to it, and the API port's /metrics then asks for a token or operator key.
            - name: metrics
              containerPort: {{ $metricsPort }}
              protocol: TCP
            {{- end }}
          {{- with $.Values.api.livenessProbe }}
          livenessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $.Values.api.readinessProbe }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
{{- end }}

{{- define "fleet.serveService" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $values := index . 2 -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "fleet.fullname" $ }}-{{ $component }}
  labels:
    {{- include "fleet.componentLabels" (list $ $component) | nindent 4 }}
spec:
  type: {{ $values.service.type }}
  ports:
    - name: http
      port: {{ $values.service.port }}
      targetPort: http
      protocol: TCP
  selector:
    {{- include "fleet.componentSelector" (list $ $component) | nindent 4 }}
{{- end }}
