#!/usr/bin/env bash
# Builds the release the operator upgrade drill starts from: the operator
# image and the chart of commit $1, into $2/<commit>/ (etcd-operator-image.tar
# and chart/). The source comes from this clone's history (git archive), and
# is built with that commit's own Makefile; a finished build is kept.
set -euo pipefail
commit=$(git rev-parse --verify "$1^{commit}")
out="$2/$commit"
if [[ -f "$out/etcd-operator-image.tar" && -f "$out/chart/Chart.yaml" ]]; then
	exit 0
fi
short=${commit:0:12}
src="$out/src"
rm -rf "$out"
mkdir -p "$src"
git archive "$commit" | tar -x -C "$src"
echo "previous-release: building the operator image of $short (its own Makefile)"
make -C "$src" --no-print-directory image VERSION="prev-$short" IMAGE="ghcr.io/seed74754924/etcd-operator:prev-$short" >"$out/build.log" 2>&1 || {
	tail -n 30 "$out/build.log" >&2
	exit 1
}
mv "$src/bin/etcd-operator-image.tar" "$out/etcd-operator-image.tar"
cp -r "$src/charts/etcd-operator" "$out/chart"
rm -rf "$src"
echo "previous-release: $out"
