#!/usr/bin/env bash
# Builds the pinned control-plane binaries into bin/ (etcd, kube-apiserver,
# kubectl) from Go modules. A binary whose stamp names the pinned version is
# kept, so only the first run pays the ~10 minute cold build.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="${BIN_DIR:-$root/bin}"
mkdir -p "$bin"

k8s_version=v1.37.2
etcd_version=v3.7.0
pkg=k8s.io/component-base/version
k8s_ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"

build() { # name version import-path ldflags
	local name=$1 version=$2 path=$3 ldflags=$4
	local stamp="$bin/.$name.version"
	if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "bin/$name $version is up to date"
		return
	fi
	echo "building bin/$name $version (slow the first time)"
	(cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name" "$path")
	echo "$version" >"$stamp"
}

build etcd "$etcd_version" go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver "$k8s_version" k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kubectl "$k8s_version" k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
