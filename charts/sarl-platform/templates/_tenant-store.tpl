{{/*
The IAM policy of a tenant's store key, as JSON: the same document as
sarl.cluster.store_access.store_policy (tests/charts/test_tenant_store.py keeps them equal), over
the prefixes of sarl.cluster.tenancy.store_prefixes: checkpoints/<ns>/, data/<ns>/, models/<ns>/
read-write, shared/ read-only, s3:ListBucket only with an s3:prefix inside them.
Call with (dict "namespace" NS "bucket" BUCKET).
*/}}
{{- define "sarl-platform.tenantStorePolicy" -}}
{{- $arn := printf "arn:aws:s3:::%s" .bucket -}}
{{- $rw := list (printf "checkpoints/%s/" .namespace) (printf "data/%s/" .namespace) (printf "models/%s/" .namespace) -}}
{{- $ro := list "shared/" -}}
{{- $rwResources := list -}}
{{- range $rw }}{{ $rwResources = append $rwResources (printf "%s/%s*" $arn .) }}{{ end -}}
{{- $roResources := list -}}
{{- range $ro }}{{ $roResources = append $roResources (printf "%s/%s*" $arn .) }}{{ end -}}
{{- $listed := list -}}
{{- range (concat $rw $ro) }}{{ $listed = append $listed (printf "%s*" .) }}{{ end -}}
{{- $rwActions := list "s3:GetObject" "s3:PutObject" "s3:DeleteObject" "s3:AbortMultipartUpload" "s3:ListMultipartUploadParts" -}}
{{- $readWrite := dict "Sid" "ReadWriteOwnPrefixes" "Effect" "Allow" "Action" $rwActions "Resource" $rwResources -}}
{{- $readShared := dict "Sid" "ReadShared" "Effect" "Allow" "Action" (list "s3:GetObject") "Resource" $roResources -}}
{{- $condition := dict "StringLike" (dict "s3:prefix" $listed) -}}
{{- $list := dict "Sid" "ListOwnAndShared" "Effect" "Allow" "Action" (list "s3:ListBucket") "Resource" (list $arn) "Condition" $condition -}}
{{- $location := dict "Sid" "BucketLocation" "Effect" "Allow" "Action" (list "s3:GetBucketLocation") "Resource" (list $arn) -}}
{{- dict "Version" "2012-10-17" "Statement" (list $readWrite $readShared $list $location) | toJson -}}
{{- end }}

{{/* Whether the tenants' store users are created in the bundled store ("true" or ""). */}}
{{- define "sarl-platform.tenantStoreUsers" -}}
{{- if and (eq .Values.objectStore.provider "minio") .Values.tenants -}}true{{- end -}}
{{- end }}
