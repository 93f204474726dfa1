#!/usr/bin/env bash
# Installs the operator into the running sandbox from its Helm chart, creates
# examples/etcdcluster.yaml and waits until that cluster is Available.
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
