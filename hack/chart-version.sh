#!/usr/bin/env bash
# Prints the chart version for a release version (git describe's output):
# the tag without its v on a tag (v1.2.0 -> 1.2.0, v1.2.0-3-gabc1234 ->
# 1.2.0-3-gabc1234); between tags 0.0.0-dev-<describe>, because a bare
# commit can be all digits with a leading zero (0869528), which SemVer, and
# so Helm, refuses as a pre-release.
set -euo pipefail
v=${1#v}
if [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]]; then
	echo "$v"
elif [[ $v == dev ]]; then
	echo "0.0.0-dev"
else
	echo "0.0.0-dev-${v//[^0-9A-Za-z-]/-}"
fi
