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

# create_bucket creates the bucket etcd-backups through MinIO's Service. The
# Deployment's rollout ends when the Pod is Ready, which can be before the
# EndpointSlice has it and kube-proxy routes the Service to it, so the first
# attempts may find nothing listening: it retries until MinIO answers, for
# two minutes at most. A bucket that exists already (a second run) is 409.
create_bucket() {
	local url=$1 deadline=$((SECONDS + 120)) code errors last
	errors=$(mktemp)
	while :; do
		code=$(curl -sS --connect-timeout 5 --max-time 15 -o /dev/null -w '%{http_code}' -X PUT \
			--aws-sigv4 "aws:amz:us-east-1:s3" --user etcd-backup:change-me "$url" 2>"$errors") || true
		if [[ $code == 200 || $code == 409 ]]; then
			rm -f "$errors"
			return 0
		fi
		if ((SECONDS >= deadline)); then
			last="HTTP $code"
			[[ $code == 000 || -z $code ]] && last="no HTTP answer: $(tr '\n' ' ' <"$errors")"
			rm -f "$errors"
			echo "sandbox-install: waited 2 minutes for MinIO to create the bucket through its Service ($url);" \
				"the last attempt got ${last% }. MinIO's Pods and EndpointSlices:" >&2
			kubectl -n backup get pods,endpointslices -o wide >&2 || true
			return 1
		fi
		sleep 1
	done
}

# failed says what a wait gave up on, shows the objects it was waiting on
# (kubectl arguments), and stops.
failed() {
	echo "sandbox-install: $1" >&2
	shift
	kubectl "$@" >&2 || true
	exit 1
}

ref=$("$here/bin/sandbox" image load --dir "$dir" "$tarball" | awk '/^loaded /{print $2; exit}')
[[ -n $ref ]] || { echo "sandbox-install: could not load $tarball" >&2; exit 1; }
echo "Installing the operator ($ref) with Helm"
# --wait also waits until the chart's CRDs are Established (Helm's readiness
# check covers CustomResourceDefinitions), so the EtcdCluster below is served.
"$bin/helm" upgrade --install etcd-operator "$here/charts/etcd-operator" \
	--namespace etcd-operator-system --create-namespace --wait --timeout 3m \
	--set image.repository="${ref%:*}" --set-string image.tag="${ref##*:}" >/dev/null ||
	failed "Helm did not install the operator, or it was not ready within 3 minutes (Helm says which above)" \
		-n etcd-operator-system get deploy,pods -o wide

echo "Creating examples/etcdcluster.yaml and waiting until it is Available"
kubectl apply -f "$here/examples/etcdcluster.yaml" >/dev/null
kubectl wait etcdcluster/example --for=condition=Available --timeout=3m >/dev/null ||
	failed "etcd cluster example was not Available within 3 minutes" get etcdcluster,etcdmember,pods -o wide
kubectl wait etcdcluster/example --for=jsonpath='{.status.readyMembers}'=3 --timeout=3m >/dev/null ||
	failed "etcd cluster example did not have 3 ready members within 3 minutes" get etcdcluster,etcdmember,pods -o wide
kubectl get etcdcluster,etcdmember,pods -o wide

echo "Starting MinIO (http://minio.backup.svc:9000) with the bucket etcd-backups"
minio_version=$(basename "$(dirname "$(readlink -f "$bin/minio")")")
sed "s|MINIO_IMAGE|quay.io/minio/minio:$minio_version|" "$here/hack/sandbox-minio.yaml" | kubectl apply -f - >/dev/null
kubectl -n backup rollout status deploy/minio --timeout=3m >/dev/null ||
	failed "MinIO was not ready within 3 minutes" -n backup get deploy,pods,pvc -o wide
ip=$(kubectl -n backup get service minio -o jsonpath='{.spec.clusterIP}')
# The host reaches Service addresses directly.
create_bucket "http://$ip:9000/etcd-backups"
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
