#!/usr/bin/env bash
# usage: hack/tools/align.sh [-check]
#
# Raises every module the tools' modules (hack/tools, helm, lint, coredns)
# share with the product to the product's version, and lists those
# a tool's module needs newer than the product has. With -check it changes
# nothing and fails when a shared module's versions differ (make verify).
#
# Why: the build cache keys a package by its dependencies' versions as well
# as its own source, so k8s.io/client-go built for helm with another
# golang.org/x/net than the product's compiles a second time. Aligned, a
# cold machine compiles the packages the product and the tools share once
# (kube-apiserver after `go vet`: 261 of its 2,079 packages compiled).
# CoreDNS is raised, not followed: where it needs a newer module than the
# product's, it keeps it. kube-network-policies keeps its own: it pins the
# Kubernetes v0.32 libraries, and it builds with v0.37 but cannot run on
# this project's CI kernel (no nft_queue), so the change would ship
# untested.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
check=0
[[ ${1:-} == -check ]] && check=1

# "path version" of each module whose packages PATTERN compiles (tests
# included), replacements resolved: only those share build cache entries.
versions() { # module-dir pattern
	(cd "$1" && go list -deps -test -f '{{with .Module}}{{if .Replace}}{{.Path}} {{.Replace.Version}}{{else}}{{.Path}} {{.Version}}{{end}}{{end}}' "$2") |
		awk 'NF == 2' | sort -u
}

# newer_or_same A B: semver A >= B. A pre-release (and so a pseudo-version
# such as v1.36.12-0.20260120151049-f2248ac996af) comes before its release.
newer_or_same() {
	local a=${1%%-*} b=${2%%-*}
	if [[ $a != "$b" ]]; then
		[[ $(printf '%s\n%s\n' "$a" "$b" | sort -V | tail -1) == "$a" ]]
		return
	fi
	[[ $1 == "$a" ]] && return 0 # A is the release
	[[ $2 == "$b" ]] && return 1 # B is, A a pre-release of it
	[[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1) == "$1" ]]
}

product=$(versions "$root" ./...)
status=0
for dir in "$here" "$here/helm" "$here/lint" "$here/coredns"; do
	name=${dir#"$root"/}
	raise=() newer=()
	# CoreDNS is a main package of its own module (main.go); the others, tools.
	pattern=tool
	[[ $name == */coredns ]] && pattern=.
	while read -r mod ours theirs; do
		[[ $ours == "$theirs" ]] && continue
		if ((check)); then
			case $name in
			*/coredns) newer_or_same "$theirs" "$ours" && continue ;;
			esac
			echo "$name: $mod $theirs, the product's $ours" >&2
			status=1
		elif newer_or_same "$ours" "$theirs"; then
			raise+=("$mod@$ours")
		else
			newer+=("$mod $theirs (product: $ours)")
		fi
	done < <(join <(echo "$product") <(versions "$dir" "$pattern"))
	((check)) && continue
	if ((${#raise[@]})); then
		echo "$name: raising ${#raise[@]} modules to the product's versions"
		(cd "$dir" && go get "${raise[@]}" && go mod tidy)
	fi
	case $name in */coredns) newer=() ;; esac
	for m in "${newer[@]}"; do
		echo "$name needs $m: raise the product's (go get), then run this again" >&2
		status=1
	done
done
exit "$status"
