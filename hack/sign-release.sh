#!/usr/bin/env bash
# Signs a release with cosign (built by hack/tools.sh like every tool).
#
#   hack/sign-release.sh blobs DIST      sign every artifact of DIST: a
#                                        sigstore bundle <artifact>.sigstore.json
#                                        beside each
#   hack/sign-release.sh image REF DIST  sign the pushed image REF
#                                        (<repository>@<digest>, as hack/image
#                                        --push prints it) and attach DIST's
#                                        SBOM and provenance to it as in-toto
#                                        attestations
#
# With COSIGN_KEY (a key file, with COSIGN_PASSWORD, or a KMS URI) it signs
# with that key and, unless COSIGN_TLOG=true, records nothing in a
# transparency log (none may be reachable: verify with
# --insecure-ignore-tlog). Without it, keyless: the OIDC identity of the
# environment (the release workflow's token) gets a certificate from
# Fulcio, and every signature goes to Rekor. COSIGN_REGISTRY_FLAGS adds
# flags for the registry (the tests' plain-HTTP one).
set -euo pipefail
cd "$(dirname "$0")/.."
cosign=$(hack/tools.sh --dir)/cosign

key=() tlog=true
if [[ -n ${COSIGN_KEY:-} ]]; then
	key=(--key "$COSIGN_KEY")
	tlog=${COSIGN_TLOG:-false}
fi
# shellcheck disable=SC2206 # flags, split on purpose
registry=(${COSIGN_REGISTRY_FLAGS:-})

case ${1:-} in
blobs)
	dist=${2:?usage: $0 blobs DIST}
	shopt -s nullglob
	for f in "$dist"/*.tar.gz "$dist"/*.tgz "$dist"/*.oci.tar "$dist"/*.spdx.json "$dist"/provenance.json "$dist"/SHA256SUMS.txt "$dist"/krew-etcd.yaml; do
		[[ -e $f ]] || continue
		"$cosign" sign-blob --yes "${key[@]}" --tlog-upload="$tlog" --bundle "$f.sigstore.json" "$f" >/dev/null 2>"$f.sign.log" ||
			{ cat "$f.sign.log" >&2; rm -f "$f.sign.log"; exit 1; }
		rm -f "$f.sign.log"
	done
	echo "signed $(ls "$dist"/*.sigstore.json | wc -l) artifacts of $dist"
	;;
image)
	ref=${2:?usage: $0 image REPOSITORY@DIGEST DIST}
	dist=${3:?usage: $0 image REPOSITORY@DIGEST DIST}
	[[ $ref == *@sha256:* ]] || { echo "$0: sign an image by its digest, not $ref" >&2; exit 2; }
	"$cosign" sign --yes "${key[@]}" --tlog-upload="$tlog" "${registry[@]}" "$ref"
	"$cosign" attest --yes "${key[@]}" --tlog-upload="$tlog" "${registry[@]}" --type spdxjson \
		--predicate "$dist/etcd-operator-image.spdx.json" "$ref"
	"$cosign" attest --yes "${key[@]}" --tlog-upload="$tlog" "${registry[@]}" --type slsaprovenance1 \
		--predicate "$dist/provenance.json" "$ref"
	echo "signed $ref and attached its SBOM and provenance"
	;;
*)
	echo "usage: $0 blobs DIST | image REPOSITORY@DIGEST DIST" >&2
	exit 2
	;;
esac
