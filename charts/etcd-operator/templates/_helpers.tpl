{{- define "etcd-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "etcd-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "etcd-operator.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "etcd-operator.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "etcd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "etcd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end }}

{{- define "etcd-operator.labels" -}}
{{ include "etcd-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "etcd-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "etcd-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "etcd-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (default .Chart.AppVersion .Values.image.tag)) }}
{{- end }}

{{- /*
The admission guards (the two deletion guards and the survivor mark's) are
ValidatingAdmissionPolicies, admissionregistration.k8s.io/v1 from Kubernetes
1.30. On an older API server the install is refused, naming each guard
still on, rather than failing half-way on an unknown kind.
*/}}
{{- define "etcd-operator.requireAdmissionPolicies" -}}
{{- if semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version }}
{{- $on := list }}
{{- if .Values.memberDeletionProtection.enabled }}
{{- $on = append $on "memberDeletionProtection.enabled=false" }}
{{- end }}
{{- if .Values.clusterDeletionProtection.enabled }}
{{- $on = append $on "clusterDeletionProtection.enabled=false" }}
{{- end }}
{{- if .Values.survivorMarkProtection.enabled }}
{{- $on = append $on "survivorMarkProtection.enabled=false" }}
{{- end }}
{{- fail (printf "the admission guards are ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1), which Kubernetes has from 1.30; this cluster runs %s. Upgrade Kubernetes, or install with --set %s (nothing then stops a user deleting an EtcdMember, which removes the member and releases its data volume, or an EtcdCluster, which deletes every member's data volume, or setting the survivor mark of a recovery on an EtcdMember, which the operator's own check alone then keeps from restarting it with --force-new-cluster)" .Capabilities.KubeVersion.Version (join " --set " $on)) }}
{{- end }}
{{- end }}
