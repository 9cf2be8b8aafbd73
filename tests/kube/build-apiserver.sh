#!/usr/bin/env bash
# Builds kube-apiserver from the k8s.io/kubernetes Go module, once, and prints its path.
#
# k8s.io/kubernetes cannot be required as it is: its go.mod points every k8s.io/* staging module
# at ./staging/src, which only exists in its own repository. A small wrapper module requires it
# and replaces each staging module with its published v0.X twin (the same code, released from
# that staging tree). The binary is cached outside the work tree, keyed by version, so a warm
# call only checks that it exists.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.35.4}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE="${PYFELIX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyfelix}"
OUT="$CACHE/kube-apiserver-$K8S_VERSION-1"

if [[ -x "$OUT/kube-apiserver" ]]; then
    echo "$OUT/kube-apiserver"
    exit 0
fi
command -v go >/dev/null || { echo "build-apiserver: go is not installed" >&2; exit 2; }

work="$OUT.build"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >download.json
upstream_mod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' download.json)"
{
    echo "module pyfelix.test/kube-apiserver"
    echo
    sed -n 's/^go \(.*\)/go \1/p' "$upstream_mod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n "s#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 $STAGING_VERSION#p" "$upstream_mod"
    echo ")"
} >go.mod
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
# The wrapper needs every module the command imports, with the versions k8s.io/kubernetes pins.
go mod tidy >&2
# The version the binary reports (/version, and the compatibility version it derives from it):
# a module build has no git tree to take it from.
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
version_pkg=k8s.io/component-base/version
ldflags="-X $version_pkg.gitVersion=$K8S_VERSION -X $version_pkg.gitMajor=1"
ldflags+=" -X $version_pkg.gitMinor=$minor -X $version_pkg.gitTreeState=clean"
go build -trimpath -ldflags "$ldflags" -o "$work/kube-apiserver" \
    k8s.io/kubernetes/cmd/kube-apiserver >&2
mkdir -p "$OUT"
mv "$work/kube-apiserver" "$OUT/kube-apiserver"
rm -rf "$work"
echo "$OUT/kube-apiserver"
