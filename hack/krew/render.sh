#!/usr/bin/env bash
# Renders the krew manifest template for a release: render.sh VERSION SUMS
# where SUMS is the cli-SHA256SUMS.txt `make cli` wrote. RELEASE_URL (env)
# is where the archives are published; it defaults to the GitHub release of
# VERSION.
set -euo pipefail
version=$1 sums=$2
url=${RELEASE_URL:-https://github.com/seed74754924/etcd-operator/releases/download/$version}
here=$(dirname "$0")
# krew wants a v-prefixed SemVer: the tag on a tag, and between tags the
# chart's version for it (a bare describe such as 0869528 is not one).
manifest_version=v$("$here/../chart-version.sh" "$version")
args=(-e "s|{{VERSION}}|$manifest_version|g" -e "s|{{RELEASE_URL}}|$url|g")
for platform in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64; do
	archive="kubectl-etcd-${platform/_/-}.tar.gz"
	sum=$(awk -v f="$archive" '$2 == f { print $1 }' "$sums")
	if [[ -z $sum ]]; then
		echo "render.sh: no checksum for $archive in $sums" >&2
		exit 1
	fi
	args+=(-e "s|{{SHA256_$platform}}|$sum|g")
done
sed "${args[@]}" "$here/etcd.yaml" | grep -v '^#'
