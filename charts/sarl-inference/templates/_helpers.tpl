{{/*
Names, labels and shared fragments of the sarl-inference chart.
*/}}

{{/* Chart name, or nameOverride. */}}
{{- define "sarl-inference.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: fullnameOverride, else the release name when it already contains the
chart name, else "<release>-<chart>". Kept to 40 characters so that KServe's derived names
("<prefix>-embedding-predictor-...") stay within DNS limits.
*/}}
{{- define "sarl-inference.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "sarl-inference.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "reward"). Never change on upgrade. */}}
{{- define "sarl-inference.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sarl-inference.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Standard labels of one component: (dict "ctx" $ "component" "reward"). */}}
{{- define "sarl-inference.labels" -}}
{{ include "sarl-inference.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: sarl
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "sarl-inference.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
"repository@digest" when the image has a digest (the release workflow writes the digests it
pushed), else "repository:tag" with the tag defaulting to the chart's appVersion:
(dict "ctx" $ "image" .Values.x.image).
*/}}
{{- define "sarl-inference.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* Name of the embedding InferenceService (the same for both backends, so its URL is stable). */}}
{{- define "sarl-inference.embeddingName" -}}
{{- printf "%s-embedding" (include "sarl-inference.fullname" .) }}
{{- end }}

{{/* True (non-empty) when the InferenceServices run as plain Deployments (no Knative). */}}
{{- define "sarl-inference.rawMode" -}}
{{- if has .Values.deploymentMode (list "RawDeployment" "Standard") }}true{{ end }}
{{- end }}

{{/*
In-cluster base URL of the embedding server for the reward service: reward.embeddingUrl, else the
embedding InferenceService's cluster-local address. KServe serves the predictor of a RawDeployment/
Standard InferenceService as "<name>-predictor"; a Serverless/Knative one as "<name>" (the cluster-
local route). Both backends serve OpenAI routes under KServe's /openai prefix.
*/}}
{{- define "sarl-inference.embeddingUrl" -}}
{{- if .Values.reward.embeddingUrl }}
{{- .Values.reward.embeddingUrl }}
{{- else }}
{{- if not .Values.embedding.enabled }}
{{- fail "reward.embeddingUrl: required when embedding.enabled is false (the reward service needs an embeddings server)" }}
{{- end }}
{{- $host := include "sarl-inference.embeddingName" . }}
{{- if include "sarl-inference.rawMode" . }}
{{- $host = printf "%s-predictor" $host }}
{{- end }}
{{- printf "http://%s.%s.svc.%s/openai" $host .Release.Namespace .Values.clusterDomain }}
{{- end }}
{{- end }}

{{/*
Serverless only: fail the render on a predictor field that Knative Serving's webhook refuses
unless its feature flag (disabled by default) is enabled and listed in knativeFeatures. Flags and
defaults from knative/serving pkg/apis/serving/fieldmask.go and config/core/configmaps/
features.yaml at knative-v1.21.1 (the release KServe v0.17.0 installs); the chart can render
these four kinds of gated field. Renders nothing.
*/}}
{{- define "sarl-inference.knativeCheck" -}}
{{- if not (include "sarl-inference.rawMode" .) }}
{{- $v := .Values }}
{{- $gated := list }}
{{- $envs := list }}
{{- $cpu := and $v.embedding.enabled (eq $v.embedding.backend "sarl-cpu") }}
{{- if or $v.judge.enabled (and $v.embedding.enabled (eq $v.embedding.backend "vllm")) }}
{{- if $v.gpu.nodeSelector }}{{ $gated = append $gated (list "gpu.nodeSelector" "kubernetes.podspec-nodeselector") }}{{ end }}
{{- if $v.gpu.tolerations }}{{ $gated = append $gated (list "gpu.tolerations" "kubernetes.podspec-tolerations") }}{{ end }}
{{- end }}
{{- if and $v.embedding.enabled (eq $v.embedding.backend "vllm") }}{{ $envs = append $envs (list "embedding.vllm.env" $v.embedding.vllm.env) }}{{ end }}
{{- if $v.judge.enabled }}{{ $envs = append $envs (list "judge.env" $v.judge.env) }}{{ end }}
{{- if $cpu }}
{{- $c := $v.embedding.sarlCpu }}
{{- if $c.nodeSelector }}{{ $gated = append $gated (list "embedding.sarlCpu.nodeSelector" "kubernetes.podspec-nodeselector") }}{{ end }}
{{- if $c.tolerations }}{{ $gated = append $gated (list "embedding.sarlCpu.tolerations" "kubernetes.podspec-tolerations") }}{{ end }}
{{- if dig "capabilities" "add" "" (default (dict) $c.securityContext) }}{{ $gated = append $gated (list "embedding.sarlCpu.securityContext.capabilities.add" "kubernetes.containerspec-addcapabilities") }}{{ end }}
{{- $envs = append $envs (list "embedding.sarlCpu.env" $c.env) }}
{{- end }}
{{- range $envs }}
{{- $key := index . 0 }}
{{- range (index . 1) }}
{{- if or (dig "valueFrom" "fieldRef" "" .) (dig "valueFrom" "resourceFieldRef" "" .) }}{{ $gated = append $gated (list (printf "%s[%s].valueFrom" $key .name) "kubernetes.podspec-fieldref") }}{{ end }}
{{- end }}
{{- end }}
{{- range $gated }}
{{- $flag := index . 1 }}
{{- if not (has $flag $v.knativeFeatures) }}
{{- fail (printf "%s: Knative Serving refuses it in deploymentMode %s unless its feature flag %s is enabled (disabled by default); set deploymentMode: RawDeployment, or enable %s in the config-features ConfigMap of knative-serving and list it in knativeFeatures" (index . 0) $v.deploymentMode $flag $flag) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Metadata annotations of every InferenceService. */}}
{{- define "sarl-inference.isvcAnnotations" -}}
serving.kserve.io/deploymentMode: {{ .Values.deploymentMode }}
{{- end }}

{{/* HF_TOKEN from the referenced Secret, when one is configured. */}}
{{- define "sarl-inference.hfTokenEnv" -}}
{{- with .Values.huggingface.tokenSecret.name }}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.huggingface.tokenSecret.key }}
{{- end }}
{{- end }}

{{/*
Resources of a vLLM runtime container: the CPU/memory values plus `gpus` accelerators in both
requests and limits (extended resources must have requests == limits):
(dict "ctx" $ "resources" .Values.judge.resources "gpus" .Values.judge.gpus).
*/}}
{{- define "sarl-inference.gpuResources" -}}
{{- $gpu := dict .ctx.Values.gpu.resourceName (toString (int .gpus)) }}
{{- $requests := merge (dict) $gpu (default (dict) .resources.requests) }}
{{- $limits := merge (dict) $gpu (default (dict) .resources.limits) -}}
requests:
  {{- toYaml $requests | nindent 2 }}
limits:
  {{- toYaml $limits | nindent 2 }}
{{- end }}

{{/* Pod-level scheduling of a GPU predictor. */}}
{{- define "sarl-inference.gpuScheduling" -}}
{{- with .Values.gpu.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.gpu.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* imagePullSecrets as a pod-spec fragment. */}}
{{- define "sarl-inference.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
vLLM arguments shared by the embedding and judge predictors:
(dict "modelName" "judge" "modelId" "..." "storageUri" "" "maxModelLen" 8192 "dtype" "auto" "gpus" 1).
*/}}
{{- define "sarl-inference.vllmArgs" -}}
- --model_name={{ .modelName }}
{{- if not .storageUri }}
- --model_id={{ .modelId }}
{{- end }}
- --backend=vllm
- --max_model_len={{ int .maxModelLen }}
- --dtype={{ .dtype }}
{{- if gt (int .gpus) 1 }}
- --tensor-parallel-size={{ int .gpus }}
{{- end }}
{{- end }}
