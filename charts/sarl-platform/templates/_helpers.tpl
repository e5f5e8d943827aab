{{/*
Names, labels, endpoints and shared fragments of the sarl-platform chart.
*/}}

{{/* Chart name, or nameOverride. */}}
{{- define "sarl-platform.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Prefix of every object name: fullnameOverride, else the release name when it already contains the
chart name, else "<release>-<chart>"; 50 characters leave room for the component suffixes.
*/}}
{{- define "sarl-platform.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "sarl-platform.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "mlflow"). Never change on upgrade. */}}
{{- define "sarl-platform.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sarl-platform.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Standard labels of one component: (dict "ctx" $ "component" "mlflow"). */}}
{{- define "sarl-platform.labels" -}}
{{ include "sarl-platform.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: sarl
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "sarl-platform.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
"repository@digest" when the image has a digest (the release workflow writes the digests it
pushed), else "repository:tag" with the tag defaulting to the chart's appVersion:
(dict "ctx" $ "image" .Values.x.image).
*/}}
{{- define "sarl-platform.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* imagePullSecrets as a pod-spec fragment (empty when none). */}}
{{- define "sarl-platform.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* Object names. */}}
{{- define "sarl-platform.operatorName" -}}{{ include "sarl-platform.fullname" . }}-operator{{- end }}
{{- define "sarl-platform.mlflowName" -}}{{ include "sarl-platform.fullname" . }}-mlflow{{- end }}
{{- define "sarl-platform.minioName" -}}{{ include "sarl-platform.fullname" . }}-minio{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "sarl-platform.operatorServiceAccount" -}}
{{- default (include "sarl-platform.operatorName" .) .Values.operator.serviceAccount.name }}
{{- end }}

{{/* In-cluster DNS name of a Service of this release: (dict "ctx" $ "name" "x-mlflow"). */}}
{{- define "sarl-platform.serviceHost" -}}
{{- printf "%s.%s.svc.%s" .name .ctx.Release.Namespace .ctx.Values.clusterDomain }}
{{- end }}

{{/* S3 endpoint URL: the release's MinIO Service, or objectStore.external.endpoint (may be empty: AWS). */}}
{{- define "sarl-platform.s3Endpoint" -}}
{{- if eq .Values.objectStore.provider "minio" }}
{{- printf "http://%s:%d" (include "sarl-platform.serviceHost" (dict "ctx" . "name" (include "sarl-platform.minioName" .))) (int .Values.objectStore.minio.service.port) }}
{{- else }}
{{- .Values.objectStore.external.endpoint }}
{{- end }}
{{- end }}

{{/* MLflow tracking URI inside the cluster. */}}
{{- define "sarl-platform.mlflowUri" -}}
{{- printf "http://%s:%d" (include "sarl-platform.serviceHost" (dict "ctx" . "name" (include "sarl-platform.mlflowName" .))) (int .Values.mlflow.service.port) }}
{{- end }}

{{/* S3 credentials from the referenced Secret as AWS_* env vars (boto3, MLflow, sarl storage). */}}
{{- define "sarl-platform.s3CredentialEnv" -}}
{{- $c := .Values.objectStore.credentials -}}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ $c.existingSecret }}
      key: {{ $c.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $c.existingSecret }}
      key: {{ $c.secretAccessKeyKey }}
{{- if eq .Values.objectStore.provider "external" }}
- name: AWS_DEFAULT_REGION
  value: {{ .Values.objectStore.external.region | quote }}
{{- end }}
{{- end }}

{{/*
Host headers MLflow accepts (--allowed-hosts). Setting the flag replaces MLflow's default list
(localhost + private IPs), so those are kept, and the Service's in-cluster names are added so
clients in other pods (the operator, training jobs) are not rejected.
*/}}
{{- define "sarl-platform.mlflowAllowedHosts" -}}
{{- $svc := include "sarl-platform.mlflowName" . }}
{{- $ns := .Release.Namespace }}
{{- $hosts := list }}
{{- range (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain)) }}
{{- $hosts = append $hosts . }}
{{- $hosts = append $hosts (printf "%s:*" .) }}
{{- end }}
{{- $hosts = concat $hosts (list "localhost" "localhost:*" "127.0.0.1" "127.0.0.1:*" "10.*" "172.16.*" "172.17.*" "172.18.*" "172.19.*" "172.2?.*" "172.30.*" "172.31.*" "192.168.*") }}
{{- $hosts = concat $hosts .Values.mlflow.allowedHosts }}
{{- join "," $hosts }}
{{- end }}

{{/*
Rules of the operator on the watched namespaces (ClusterRole or Role): exactly the calls it
makes, pinned by tests/operators/test_rbac.py (a call without a rule, or a rule no call uses,
fails it). Nothing is deleted (children go with their owner, by the garbage collector) and pods
are never read.
*/}}
{{- define "sarl-platform.operatorRules" -}}
# kopf lists and watches Experiments and Studies and patches them (finalizers, annotations;
# status through the subresource); a Study's handlers get and create its arm x seed Experiments;
# the status timers get the object itself before writing its status.
- apiGroups: ["sarl.dev"]
  resources: ["experiments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["sarl.dev"]
  resources: ["studies"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["sarl.dev"]
  resources: ["experiments/status", "studies/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion, which the API server's
# OwnerReferencesPermissionEnforcement allows only with update on the owner's finalizers.
- apiGroups: ["sarl.dev"]
  resources: ["experiments/finalizers", "studies/finalizers"]
  verbs: ["update"]
# Children applied by kube.apply: get, then create or merge-patch.
- apiGroups: ["kubeflow.org"]
  resources: ["pytorchjobs"]
  verbs: ["get", "create", "patch"]
# Or, with Kubeflow Trainer v2 (spec.resources.job_kind), TrainJobs.
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"]
  verbs: ["get", "create", "patch"]
# InferenceServices are also deleted once no run needs them (spec.serving.release).
- apiGroups: ["serving.kserve.io"]
  resources: ["inferenceservices"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# Each Experiment's NetworkPolicies (sarl_operator.network_policies), applied as children.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch"]
# Evaluation and Study report Jobs: created once, never patched (a Job's template is immutable).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "create"]
# The Workload Kueue creates for a job with a queue label (found by its job-uid label), for
# the Experiment's Admitted condition and Queued phase.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list"]
# kopf reports progress and errors as core v1 Events.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# The handlers check that the S3 credentials Secret the pods reference exists in the
# Experiment's namespace: that one name only, never other Secrets.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: [{{ .Values.objectStore.credentials.existingSecret | quote }}{{ if .Values.tenants }}, "sarl-tenant"{{ end }}]
  verbs: ["get"]
{{- end }}

{{/*
The namespaces the operator watches, as a JSON list (fromJsonArray): operator.watchNamespaces
and every tenant's namespace; neither: the release namespace alone, unless operator.clusterWide
(then an empty list: every namespace, with a ClusterRole). The operator's rights are Roles in
these namespaces only: it cannot create Jobs or read Secrets anywhere else (kube-system
included).
*/}}
{{- define "sarl-platform.watchedNamespaces" -}}
{{- $listed := concat .Values.operator.watchNamespaces (list) -}}
{{- range .Values.tenants }}{{ $listed = append $listed .namespace }}{{ end -}}
{{- if and (not $listed) (not .Values.operator.clusterWide) }}{{ $listed = list .Release.Namespace }}{{ end -}}
{{- $listed | uniq | toJson -}}
{{- end }}

{{/* The admission webhook's Service, and its generated TLS Secret. */}}
{{- define "sarl-platform.webhookName" -}}{{ include "sarl-platform.operatorName" . }}-webhook{{- end }}
{{- define "sarl-platform.webhookTlsSecret" -}}
{{- default (printf "%s-tls" (include "sarl-platform.webhookName" .)) .Values.operator.admissionWebhook.tls.existingSecret }}
{{- end }}

{{/* Whether the operator serves the admission webhook. */}}
{{- define "sarl-platform.webhookEnabled" -}}
{{- if and .Values.operator.enabled .Values.operator.admissionWebhook.enabled }}true{{ end }}
{{- end }}

{{/*
Whether to render the ClusterTrainingRuntime: trainer.v2.runtime.enabled true, or auto and the
cluster serves the kind (`helm install`/`upgrade` ask the API server's discovery; `helm template`
knows only what --api-versions lists).
*/}}
{{- define "sarl-platform.trainingRuntimeEnabled" -}}
{{- $enabled := .Values.trainer.v2.runtime.enabled }}
{{- if eq (toString $enabled) "auto" }}
{{- if .Capabilities.APIVersions.Has "trainer.kubeflow.org/v1alpha1/ClusterTrainingRuntime" }}true{{ end }}
{{- else if $enabled }}true{{ end }}
{{- end }}

{{/*
Capacity of the object store as a Kubernetes quantity, for the operator's storage check
(SARL_STORE_CAPACITY): the bundled server's volume size, else objectStore.external.capacity
(empty: unknown).
*/}}
{{- define "sarl-platform.storeCapacity" -}}
{{- if eq .Values.objectStore.provider "minio" }}
{{- .Values.objectStore.minio.persistence.size }}
{{- else }}
{{- .Values.objectStore.external.capacity | default "" }}
{{- end }}
{{- end }}

{{/*
The platform's settings as the operator's SARL_* environment (sarl_operator.platform_settings):
the operator's Deployment and the admission webhook's (which checks specs against the same
settings) both include it, so the two never disagree. Indent with nindent 12.
*/}}
{{- define "sarl-platform.platformEnv" -}}
{{- $o := .Values.operator -}}
{{- if .Values.mlflow.enabled }}
- name: SARL_MLFLOW_TRACKING_URI
  value: {{ include "sarl-platform.mlflowUri" . | quote }}
{{- end }}
- name: SARL_S3_ENDPOINT_URL
  value: {{ include "sarl-platform.s3Endpoint" . | quote }}
- name: SARL_S3_BUCKET
  value: {{ .Values.objectStore.bucket | quote }}
# What the bucket can hold (a quantity; empty: unknown): runs whose checkpoints
# do not fit are refused before they start.
- name: SARL_STORE_CAPACITY
  value: {{ include "sarl-platform.storeCapacity" . | quote }}
- name: SARL_S3_CREDENTIALS_SECRET
  value: {{ .Values.objectStore.credentials.existingSecret | quote }}
- name: SARL_S3_ACCESS_KEY_ID_KEY
  value: {{ .Values.objectStore.credentials.accessKeyIdKey | quote }}
- name: SARL_S3_SECRET_ACCESS_KEY_KEY
  value: {{ .Values.objectStore.credentials.secretAccessKeyKey | quote }}
- name: SARL_TRAINER_IMAGE
  value: {{ include "sarl-platform.image" (dict "ctx" . "image" .Values.trainer.image) | quote }}
- name: SARL_TRL_TRAINER_IMAGE
  value: {{ include "sarl-platform.image" (dict "ctx" . "image" .Values.trainer.trlImage) | quote }}
- name: SARL_MLFLOW_UI_URL
  value: {{ $o.mlflowUiUrl | quote }}
- name: SARL_DATA_URI
  value: {{ $o.dataUri | quote }}
- name: SARL_STATUS_INTERVAL_S
  value: {{ $o.statusIntervalSeconds | quote }}
- name: SARL_ALLOWED_IMAGE_REGISTRIES
  value: {{ join "," $o.allowedImageRegistries | quote }}
# Tenant namespaces and their policies (sarl.cluster.tenancy; values `tenants`).
- name: SARL_TENANTS
  value: {{ dict "tenants" .Values.tenants | toJson | quote }}
# Rewards a spec may name by import path; never imported by the operator.
- name: SARL_ALLOWED_REWARD_MODULES
  value: {{ join "," $o.allowedRewardModules | quote }}
# Kueue and gang scheduling of the jobs (sarl_operator.scheduling).
# Hugging Face Hub mirror for pods whose spec names none (trainer.hfEndpoint).
- name: SARL_HF_ENDPOINT
  value: {{ .Values.trainer.hfEndpoint | default "" | quote }}
- name: SARL_DEFAULT_QUEUE
  value: {{ .Values.kueue.defaultQueue | default "" | quote }}
- name: SARL_GANG_SCHEDULER
  value: {{ .Values.gangScheduler | default "none" | quote }}
# Whether the operator applies each Experiment's NetworkPolicies (networkPolicy.enabled).
- name: SARL_NETWORK_POLICIES
  value: {{ .Values.networkPolicy.enabled | quote }}
{{- end }}

{{/*
Whether MLflow runs its basic-auth app: mlflow.auth.enabled true, or auto (the default) and the
platform has tenants (each gets its own MLflow user; a single-team install's pods have no user to
log in as, and NetworkPolicies keep its MLflow to the release's and the watched namespaces' pods).
*/}}
{{- define "sarl-platform.mlflowAuth" -}}
{{- $a := .Values.mlflow.auth.enabled -}}
{{- if and .Values.mlflow.enabled (or (eq (toString $a) "true") (and (eq (toString $a) "auto") .Values.tenants)) }}true{{ end }}
{{- end }}
