#!/usr/bin/env bash
# Installs what the sandbox's nodes need from Debian's packages, and says
# clearly when it cannot: runc (containerd's runtime), the CNI plugins
# (bridge, host-local, loopback) and nft (kube-proxy's nftables mode and the
# sandbox's network faults), and curl (which makes the sandbox MinIO's
# bucket). Everything else is built by hack/tools.sh.
set -euo pipefail

packages=(runc containernetworking-plugins nftables curl)
missing_any() {
	[[ -x /usr/sbin/runc ]] || return 0
	local p
	for p in bridge host-local loopback; do [[ -x /usr/lib/cni/$p ]] || return 0; done
	command -v nft >/dev/null || return 0
	command -v curl >/dev/null || return 0
	return 1
}

missing_any || exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
	echo "sandbox-deps: the sandbox needs runc in /usr/sbin, the CNI plugins in /usr/lib/cni, nft and curl;" >&2
	echo "sandbox-deps: install them as root (Debian/Ubuntu: apt-get install ${packages[*]})" >&2
	exit 1
fi
echo "sandbox-deps: installing ${packages[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${packages[@]}" >/tmp/sandbox-deps.log 2>&1; then
	apt-get update -q >>/tmp/sandbox-deps.log 2>&1 || true
	if ! apt-get install -y -q --no-install-recommends "${packages[@]}" >>/tmp/sandbox-deps.log 2>&1; then
		echo "sandbox-deps: apt-get could not install ${packages[*]}; see /tmp/sandbox-deps.log" >&2
		exit 1
	fi
fi
missing_any && { echo "sandbox-deps: installed, but runc, the CNI plugins, nft or curl are still missing" >&2; exit 1; }
exit 0
