#!/usr/bin/env bash
# Prints, as NAME=VALUE lines for $GITHUB_ENV, where a release of the repository owned by OWNER
# is published: its image repository (PME_RELEASE_IMAGE, which scripts/release.sh compiles in)
# and its charts' OCI repository (PME_RELEASE_CHARTS). Registries want lower case; GitHub
# owners may have upper-case letters.
#
#   scripts/release/image-repository.sh OWNER
set -euo pipefail
owner="${1:?usage: image-repository.sh OWNER}"
owner="${owner,,}"
[[ "$owner" =~ ^[a-z0-9-]+$ ]] || { echo "image-repository: owner $owner: letters, digits and '-' only" >&2; exit 2; }
echo "PME_RELEASE_IMAGE=ghcr.io/$owner/passmower-elector"
echo "PME_RELEASE_CHARTS=oci://ghcr.io/$owner/charts"
