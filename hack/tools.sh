#!/usr/bin/env bash
# Builds the pinned toolchain from the Go module proxy into a per-user cache.
#
#   hack/tools.sh            build what is missing, print the bin directory last
#   hack/tools.sh --dir      print the bin directory only (builds nothing)
#
# Layout under $ETCD_OPERATOR_TOOLS (default $HOME/.cache/etcd-operator/tools):
#   kubernetes/v<ver>/{kube-apiserver,kube-controller-manager,kube-scheduler,
#                      kubelet,kube-proxy,kubectl}
#   etcd/v<ver>/{etcd,etcdctl,etcdutl}          one directory per supported release
#   containerd/v<ver>/{containerd,containerd-shim-runc-v2,ctr}
#   coredns/v<ver>/coredns                      only the plugins the sandbox uses
#   pause/<source hash>/pause                   the sandbox's Pod sandbox process
#   golangci-lint/v<ver>/golangci-lint
#   helm/v<ver>/helm
#   cosign/v<ver>/cosign                        signs a release, verifies it in the release tests
#   minio/<ver>/minio                           the S3 server of snapshot tests
#   promtool/<ver>/promtool                     Prometheus's rule checker (the chart's alerts)
#   prometheus/<ver>/prometheus                 Prometheus itself, Kubernetes discovery only (alert drills)
#   cert-manager/v<ver>-<source hash>/{cert-manager-controller,crds/}
#                                               cert-manager's controllers (hack/cert-manager)
#   bin/                                        symlinks to the default versions
#
# The sandbox's nodes also need runc and the CNI plugins, which come from
# Debian's packages: hack/sandbox-deps.sh installs them.
#
# Every tool is built in a temporary directory and renamed into place under a
# lock, so concurrent runs and interrupted builds never leave a half-built tool.
#
# A cold build (empty Go module and build caches) took 20m47s on the project's
# 2-core machine with other work beside it; each build says when it starts
# with what it took there, every minute while it runs, and when it is done.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

root=${ETCD_OPERATOR_TOOLS:-$HOME/.cache/etcd-operator/tools}
bin=$root/bin
read -r -a etcd_versions <<<"$ETCD_VERSIONS"
default_etcd=${etcd_versions[0]}

kube_dir=$root/kubernetes/v$KUBERNETES_VERSION
kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
containerd_dir=$root/containerd/v$CONTAINERD_VERSION
containerd_cmds=(containerd containerd-shim-runc-v2 ctr)
coredns_dir=$root/coredns/v$COREDNS_VERSION
pause_src=$here/../test/infra/sandbox/pause/main.go
pause_dir=$root/pause/$(sha256sum "$pause_src" | cut -c1-12)
lint_dir=$root/golangci-lint/v$GOLANGCI_LINT_VERSION
helm_dir=$root/helm/v$HELM_VERSION
cosign_dir=$root/cosign/v$COSIGN_VERSION
minio_dir=$root/minio/$MINIO_VERSION
promtool_dir=$root/promtool/$PROMETHEUS_VERSION
prometheus_dir=$root/prometheus/$PROMETHEUS_VERSION
cm_src=$here/cert-manager
# Keyed by the wiring's source (tests excluded), like the pause process.
cm_dir=$root/cert-manager/$CERT_MANAGER_VERSION-$(cd "$cm_src" && ls go.mod go.sum *.go | grep -v '_test\.go$' | xargs cat | sha256sum | cut -c1-12)

if [[ ${1:-} == --dir ]]; then
	echo "$bin"
	exit 0
fi

# complete reports whether every expected file is in place, so a warm run does
# no work and takes no lock.
complete() {
	local f
	for f in "${kube_cmds[@]/#/$kube_dir/}" "${containerd_cmds[@]/#/$containerd_dir/}" "$coredns_dir/coredns" \
		"$pause_dir/pause" "$lint_dir/golangci-lint" "$helm_dir/helm" "$cosign_dir/cosign" "$minio_dir/minio" \
		"$cm_dir/cert-manager-controller" "$promtool_dir/promtool" "$prometheus_dir/prometheus"; do
		[[ -x $f ]] || return 1
	done
	for v in "${etcd_versions[@]}"; do
		for f in etcd etcdctl etcdutl; do [[ -x $root/etcd/v$v/$f ]] || return 1; done
	done
	for f in "${kube_cmds[@]}" "${containerd_cmds[@]}" coredns pause etcd etcdctl etcdutl golangci-lint helm cosign minio cert-manager-controller promtool prometheus; do
		[[ -x $bin/$f ]] || return 1
	done
	[[ $(readlink "$bin/etcd") == "$root/etcd/v$default_etcd/etcd" ]] || return 1
	[[ $(readlink "$bin/kube-apiserver") == "$kube_dir/kube-apiserver" ]] || return 1
	[[ $(readlink "$bin/containerd") == "$containerd_dir/containerd" ]] || return 1
	[[ $(readlink "$bin/coredns") == "$coredns_dir/coredns" ]] || return 1
	[[ $(readlink "$bin/pause") == "$pause_dir/pause" ]] || return 1
	[[ $(readlink "$bin/golangci-lint") == "$lint_dir/golangci-lint" ]] || return 1
	[[ $(readlink "$bin/helm") == "$helm_dir/helm" ]] || return 1
	[[ $(readlink "$bin/cosign") == "$cosign_dir/cosign" ]] || return 1
	[[ $(readlink "$bin/minio") == "$minio_dir/minio" ]] || return 1
	[[ $(readlink "$bin/cert-manager-controller") == "$cm_dir/cert-manager-controller" ]] || return 1
	[[ $(readlink "$bin/promtool") == "$promtool_dir/promtool" ]] || return 1
	[[ $(readlink "$bin/prometheus") == "$prometheus_dir/prometheus" ]] || return 1
}

if complete; then
	echo "$bin"
	exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
	echo "tools: waiting for another hack/tools.sh that is building into $root" >&2
	flock 9
fi

work=$(mktemp -d "$root/.build.XXXXXX")
trap 'stop_heartbeat; rm -rf "$work"' EXIT
log=$root/build.log
: >"$log"

# Progress. Each estimate is the time of that build on a cold cache on the
# 2-core machine, in the order below (later builds reuse modules and
# packages the earlier ones fetched and compiled).
built=0 step_began=0 step_name='' step_estimate=0 beat=''

# duration prints a number of seconds as 3m05s, 10m or 42s.
duration() {
	local m=$(($1 / 60)) s=$(($1 % 60))
	if ((m == 0)); then
		printf '%ds' "$s"
	elif ((s == 0)); then
		printf '%dm' "$m"
	else
		printf '%dm%02ds' "$m" "$s"
	fi
}

# begin announces one build and its estimate (seconds), and starts a
# heartbeat; the first says where the log goes.
begin() {
	step_name=$1 step_estimate=$2 step_began=$SECONDS
	if ((built == 0)); then
		echo "tools: building the pinned toolchain into $root (from empty Go caches about 21 minutes on two cores; log: $log)" >&2
	fi
	built=$((built + 1))
	echo "tools: building $step_name (about $(duration "$step_estimate") on a cold cache)" >&2
	start_heartbeat
}

# finish says how long the build took, and how long tools.sh has run.
finish() {
	stop_heartbeat
	echo "tools: built $step_name in $(duration $((SECONDS - step_began))) ($(duration "$SECONDS") since tools.sh started)" >&2
}

# start_heartbeat prints a line every minute while a build runs, so a quiet
# compiler is not taken for a hung script. It runs in the background without
# the lock's descriptor or stdout (callers read the last line of stdout), and
# ends when this script does, even if it is killed.
start_heartbeat() {
	local parent=$$
	(
		exec 9>&-
		trap 'kill "$nap" 2>/dev/null; exit 0' TERM
		while :; do
			sleep 60 >/dev/null 2>&1 &
			nap=$!
			wait "$nap"
			kill -0 "$parent" 2>/dev/null || exit 0
			echo "tools: still building $step_name: $(duration $((SECONDS - step_began))) so far, about $(duration "$step_estimate") on a cold cache"
		done
	) >&2 &
	beat=$!
}

stop_heartbeat() {
	[[ -n $beat ]] || return 0
	kill "$beat" 2>/dev/null || true
	wait "$beat" 2>/dev/null || true
	beat=''
}

# fail prints one line naming the module that could not be built, and exits.
fail() {
	local module=$1
	local reason
	reason=$(grep -m1 -iE 'dial tcp|no such host|connection refused|timeout|proxy|not found|unknown revision|go: ' "$log" || tail -n1 "$log")
	echo "tools: cannot build $module: ${reason:-see $log} (full log: $log)" >&2
	exit 1
}

# gobuild runs the go command with the environment every tool build shares.
gobuild() {
	CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off go "$@" >>"$log" 2>&1
}

# install_dir renames a freshly built directory into its versioned place.
install_dir() {
	local from=$1 to=$2
	mkdir -p "$(dirname "$to")"
	rm -rf "$to.old"
	[[ -e $to ]] && mv "$to" "$to.old"
	mv "$from" "$to"
	rm -rf "$to.old"
}

build_kubernetes() {
	local v=$KUBERNETES_VERSION mod=k8s.io/kubernetes@v$KUBERNETES_VERSION
	local minor=${v#*.}
	minor=${minor%%.*}
	local c missing=
	for c in "${kube_cmds[@]}"; do [[ -x $kube_dir/$c ]] || missing=1; done
	[[ -z $missing ]] && return
	begin "kubernetes v$v" 600
	local w=$work/kubernetes
	mkdir -p "$w/out"
	gomod=$(cd "$w" && GOFLAGS=-mod=mod go mod download -json "$mod" 2>>"$log" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p') || true
	[[ -n $gomod && -f $gomod ]] || fail "$mod"
	{
		echo "module etcd-operator.local/kubernetes-tools"
		echo "go 1.26"
		echo "require k8s.io/kubernetes v$v"
		# Each staging module is replaced by a relative path in kubernetes' own
		# go.mod; point it at the published v0.x release of the same minor.
		sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#replace \1 => \1 v0.'"$minor"'.'"${v##*.}"'#p' "$gomod"
	} >"$w/go.mod"
	local ld="-s -w -X k8s.io/component-base/version.gitVersion=v$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	ld+=" -X k8s.io/client-go/pkg/version.gitVersion=v$v -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
	(cd "$w" && gobuild get "k8s.io/kubernetes/cmd/kube-apiserver@v$v") || fail "$mod"
	# One build for every command: they share most packages, and their links
	# run side by side.
	(cd "$w" && gobuild build -trimpath -ldflags "$ld" -o out/ "${kube_cmds[@]/#/k8s.io/kubernetes/cmd/}") || fail "$mod"
	install_dir "$w/out" "$kube_dir"
	finish
}

build_etcd() {
	local v=$1 dir=$root/etcd/v$1
	[[ -x $dir/etcd && -x $dir/etcdctl && -x $dir/etcdutl ]] && return
	begin "etcd v$v" 35
	local w=$work/etcd-$v
	mkdir -p "$w/out"
	printf 'module etcd-operator.local/etcd-tools\n\ngo 1.26\n' >"$w/go.mod"
	(cd "$w" && gobuild get "go.etcd.io/etcd/server/v3@v$v" "go.etcd.io/etcd/etcdctl/v3@v$v" "go.etcd.io/etcd/etcdutl/v3@v$v") ||
		fail "go.etcd.io/etcd/server/v3@v$v"
	# One build for the three binaries; server/v3 comes out named "server".
	(cd "$w" && gobuild build -trimpath -ldflags "-s -w" -o out/ go.etcd.io/etcd/server/v3 \
		go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3) || fail "go.etcd.io/etcd/server/v3@v$v"
	mv "$w/out/server" "$w/out/etcd"
	install_dir "$w/out" "$dir"
	finish
}

build_containerd() {
	local v=$CONTAINERD_VERSION mod=github.com/containerd/containerd/v2
	local c missing=
	for c in "${containerd_cmds[@]}"; do [[ -x $containerd_dir/$c ]] || missing=1; done
	[[ -z $missing ]] && return
	begin "containerd v$v" 60
	local w=$work/containerd
	mkdir -p "$w/out"
	printf 'module etcd-operator.local/containerd-tools\n\ngo 1.26\n' >"$w/go.mod"
	(cd "$w" && gobuild get "$mod@v$v") || fail "$mod@v$v"
	# Static, and without the snapshotters that need C libraries or kernel
	# features the sandbox does not use.
	(cd "$w" && gobuild build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "-s -w -X $mod/version.Version=v$v -X $mod/version.Package=$mod" \
		-o out/ "${containerd_cmds[@]/#/$mod/cmd/}") || fail "$mod@v$v"
	install_dir "$w/out" "$containerd_dir"
	finish
}

# build_coredns builds CoreDNS with the few plugins the sandbox's Corefile
# uses: the stock command links every plugin (cloud DNS providers included)
# and takes twice as long.
build_coredns() {
	local v=$COREDNS_VERSION mod=github.com/coredns/coredns
	[[ -x $coredns_dir/coredns ]] && return
	begin "coredns v$v" 80
	local w=$work/coredns p
	mkdir -p "$w/out"
	printf 'module etcd-operator.local/coredns-tools\n\ngo 1.26\n' >"$w/go.mod"
	{
		echo "// Command coredns is CoreDNS with the sandbox's plugins only."
		echo "package main"
		echo "import ("
		echo "	\"$mod/coremain\""
		echo "	_ \"$mod/core/dnsserver\""
		for p in $COREDNS_PLUGINS; do echo "	_ \"$mod/plugin/$p\""; done
		echo ")"
		echo "func main() { coremain.Run() }"
	} >"$w/main.go"
	(cd "$w" && gobuild get "$mod@v$v") || fail "$mod@v$v"
	(cd "$w" && gobuild build -trimpath -ldflags "-s -w" -o out/coredns .) || fail "$mod@v$v"
	install_dir "$w/out" "$coredns_dir"
	finish
}

# build_pause builds the sandbox's own pause process (the program that holds
# a Pod's namespaces) from the repository, keyed by its source.
build_pause() {
	[[ -x $pause_dir/pause ]] && return
	begin "the sandbox's pause" 1
	local w=$work/pause
	mkdir -p "$w/out"
	(cd "$here/.." && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$w/out/pause" ./test/infra/sandbox/pause >>"$log" 2>&1) ||
		fail "test/infra/sandbox/pause"
	install_dir "$w/out" "$pause_dir"
	finish
}

build_golangci_lint() {
	local v=$GOLANGCI_LINT_VERSION mod=github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$GOLANGCI_LINT_VERSION
	[[ -x $lint_dir/golangci-lint ]] && return
	begin "golangci-lint v$v" 60
	local w=$work/golangci-lint
	mkdir -p "$w/out"
	(cd "$w" && GOBIN="$w/out" gobuild install -trimpath -ldflags "-s -w" "$mod") || fail "$mod"
	install_dir "$w/out" "$lint_dir"
	finish
}

build_helm() {
	local v=$HELM_VERSION mod=helm.sh/helm/v3/cmd/helm@v$HELM_VERSION
	[[ -x $helm_dir/helm ]] && return
	begin "helm v$v" 60
	local w=$work/helm
	mkdir -p "$w/out"
	(cd "$w" && GOBIN="$w/out" gobuild install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$v" "$mod") || fail "$mod"
	install_dir "$w/out" "$helm_dir"
	finish
}

# build_cosign builds cosign, which signs a release's artifacts and image
# and attaches its attestations (hack/sign-release.sh), and verifies them in
# the release tests.
build_cosign() {
	local v=$COSIGN_VERSION mod=github.com/sigstore/cosign/v2/cmd/cosign@v$COSIGN_VERSION
	[[ -x $cosign_dir/cosign ]] && return
	begin "cosign v$v" 240
	local w=$work/cosign
	mkdir -p "$w/out"
	(cd "$w" && GOBIN="$w/out" gobuild install -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=v$v" "$mod") || fail "$mod"
	install_dir "$w/out" "$cosign_dir"
	finish
}

# build_minio builds the MinIO server, a real S3 implementation for the
# snapshot tests and the sandbox. It runs as a separate program only; no
# MinIO code is part of the operator.
build_minio() {
	local v=$MINIO_VERSION mod=github.com/minio/minio@$MINIO_VERSION
	[[ -x $minio_dir/minio ]] && return
	begin "minio $v" 135
	local w=$work/minio
	mkdir -p "$w/out"
	(cd "$w" && GOBIN="$w/out" gobuild install -trimpath -ldflags "-s -w" "$mod") || fail "$mod"
	install_dir "$w/out" "$minio_dir"
	finish
}

# build_prometheus_cmd builds one command of Prometheus's module into dir,
# with the given build tags: remove_all_sd leaves out Prometheus's service
# discovery (the cloud SDKs), a fraction of the build; enable_<name>_sd puts
# one back. Nothing of Prometheus is part of the operator.
build_prometheus_cmd() {
	local cmd=$1 tags=$2 dir=$3 estimate=$4 v=$PROMETHEUS_VERSION
	local mod=github.com/prometheus/prometheus/cmd/$cmd@$PROMETHEUS_VERSION
	[[ -x $dir/$cmd ]] && return
	begin "$cmd $v" "$estimate"
	local w=$work/$cmd
	mkdir -p "$w/out"
	(cd "$w" && GOBIN="$w/out" gobuild install -tags "$tags" -trimpath -ldflags "-s -w" "$mod") || fail "$mod"
	install_dir "$w/out" "$dir"
	finish
}

# promtool checks and tests the chart's alert rules (no discovery needed).
build_promtool() { build_prometheus_cmd promtool remove_all_sd "$promtool_dir" 120; }

# prometheus is the server the alert drills run beside the suites
# (test/e2e/prometheus_test.go): Kubernetes discovery alone, and no web UI
# assets (the tests ask its API). 4m48s cold on the 2-core machine.
build_prometheus() { build_prometheus_cmd prometheus remove_all_sd,enable_kubernetes_sd "$prometheus_dir" 290; }

# build_cert_manager builds hack/cert-manager, a module of its own that runs
# cert-manager's real controllers, and copies the CRDs of the same release
# next to it. Its directory is keyed by its source too, so a change to the
# wiring gets a new binary and a new sandbox image.
build_cert_manager() {
	local v=$CERT_MANAGER_VERSION mod=github.com/cert-manager/cert-manager
	[[ -x $cm_dir/cert-manager-controller ]] && return
	grep -qE "^[[:space:]]*(require )?$mod $v\$" "$cm_src/go.mod" ||
		{ echo "tools: hack/cert-manager/go.mod must require $mod $v (hack/versions.env)" >&2; exit 1; }
	begin "cert-manager-controller $v" 150
	local w=$work/cert-manager crds
	mkdir -p "$w/out/crds"
	(cd "$cm_src" && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags "-s -w" -o "$w/out/cert-manager-controller" . >>"$log" 2>&1) ||
		fail "hack/cert-manager"
	crds=$(cd "$cm_src" && GOWORK=off go list -m -f '{{.Dir}}' "$mod" 2>>"$log")/deploy/crds
	cp "$crds"/*.yaml "$w/out/crds/" || fail "$mod@$v"
	chmod -R u+w "$w/out/crds"
	install_dir "$w/out" "$cm_dir"
	finish
}

# link points bin/<name> at target, replacing any older link atomically.
link() {
	ln -sfn "$2" "$bin/.$1.tmp"
	mv -T "$bin/.$1.tmp" "$bin/$1"
}

build_kubernetes
for v in "${etcd_versions[@]}"; do build_etcd "$v"; done
build_containerd
build_coredns
build_pause
build_golangci_lint
build_helm
build_cosign
build_minio
build_cert_manager
build_promtool
build_prometheus

mkdir -p "$bin"
for c in "${kube_cmds[@]}"; do link "$c" "$kube_dir/$c"; done
for c in "${containerd_cmds[@]}"; do link "$c" "$containerd_dir/$c"; done
link coredns "$coredns_dir/coredns"
link pause "$pause_dir/pause"
for c in etcd etcdctl etcdutl; do link "$c" "$root/etcd/v$default_etcd/$c"; done
link golangci-lint "$lint_dir/golangci-lint"
link helm "$helm_dir/helm"
link cosign "$cosign_dir/cosign"
link minio "$minio_dir/minio"
link cert-manager-controller "$cm_dir/cert-manager-controller"
link promtool "$promtool_dir/promtool"
link prometheus "$prometheus_dir/prometheus"

((built == 0)) || echo "tools: the toolchain is ready after $(duration "$SECONDS")" >&2
echo "$bin"
