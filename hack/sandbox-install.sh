#!/usr/bin/env bash
# Installs the operator into the running sandbox from its Helm chart, creates
# examples/etcdcluster.yaml and waits until that cluster is Available, and
# starts MinIO (hack/sandbox-minio.yaml) with the bucket etcd-backups and a
# claim etcd-backups, where the snapshot examples write.
#   hack/sandbox-install.sh SANDBOX_DIR IMAGE_TARBALL
set -euo pipefail
dir=${1:?sandbox dir}
tarball=${2:?image tarball}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$("$here/hack/tools.sh" --dir)
export KUBECONFIG=$dir/kubeconfig

ref=$("$here/bin/sandbox" image load --dir "$dir" "$tarball" | awk '/^loaded /{print $2; exit}')
[[ -n $ref ]] || { echo "sandbox-install: could not load $tarball" >&2; exit 1; }
echo "Installing the operator ($ref) with Helm"
"$bin/helm" upgrade --install etcd-operator "$here/charts/etcd-operator" \
	--namespace etcd-operator-system --create-namespace --wait --timeout 3m \
	--set image.repository="${ref%:*}" --set-string image.tag="${ref##*:}" >/dev/null

echo "Creating examples/etcdcluster.yaml and waiting until it is Available"
kubectl apply -f "$here/examples/etcdcluster.yaml" >/dev/null
if ! kubectl wait etcdcluster/example --for=condition=Available --timeout=3m >/dev/null; then
	kubectl get etcdcluster,etcdmember,pods -o wide >&2
	exit 1
fi
kubectl wait etcdcluster/example --for=jsonpath='{.status.readyMembers}'=3 --timeout=3m >/dev/null
kubectl get etcdcluster,etcdmember,pods -o wide

echo "Starting MinIO (http://minio.backup.svc:9000) with the bucket etcd-backups"
minio_version=$(basename "$(dirname "$(readlink -f "$bin/minio")")")
sed "s|MINIO_IMAGE|quay.io/minio/minio:$minio_version|" "$here/hack/sandbox-minio.yaml" | kubectl apply -f - >/dev/null
kubectl -n backup rollout status deploy/minio --timeout=3m >/dev/null
ip=$(kubectl -n backup get service minio -o jsonpath='{.spec.clusterIP}')
# The host reaches Service addresses directly; a bucket that exists already
# (a second run) answers 409.
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
	--user etcd-backup:change-me "http://$ip:9000/etcd-backups")
[[ $code == 200 || $code == 409 ]] || { echo "sandbox-install: creating the bucket answered HTTP $code" >&2; exit 1; }
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: etcd-backups
  namespace: default
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 5Gi
EOF
