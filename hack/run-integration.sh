#!/usr/bin/env bash
# usage: hack/run-integration.sh PACKAGE...   (make test-integration)
#
# Compiles every package's test binary first (go test -c, INTEGRATION_P
# packages at a time), then runs them INTEGRATION_RUNS (2) at a time, each in
# its package's directory as `go test` would, and prints a package's output
# when it ends: "ok" when it passed, all of it when it failed or when
# INTEGRATION_FLAGS has -test.v. INTEGRATION_FLAGS are the test binaries'
# own flags (-test.run=TestX, -test.v, -test.count=1).
#
# Compiling first is the point: the packages each start a control plane and
# wait on it with deadlines, and on a cold machine `go test -exec` linked the
# remaining binaries beside the running ones until two operators missed their
# 60 s to serve. Nothing else compiles beside them now, except `make
# test-prebuild` at the lowest CPU priority.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/bin/test-binaries
runs=${INTEGRATION_RUNS:-2}
timeout=${INTEGRATION_TIMEOUT:-45m}
read -r -a flags <<<"${INTEGRATION_FLAGS:-}"
verbose=0
for f in "${flags[@]}"; do
	case $f in -test.v | -test.v=true | -test.v=test2json) verbose=1 ;; esac
done

rm -rf "$out"
mkdir -p "$out/logs"
# Only packages with tests: `go test -c -o DIR/` names a binary after the
# last element of its package's import path, and refuses two of one name
# even when one has no tests (test/nodeagent, test/nodeagent/cmd/nodeagent).
go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' "$@" | sed '/^$/d' >"$out/packages"
if dup=$(awk '{n = split($1, p, "/"); print p[n]}' "$out/packages" | sort | uniq -d) && [[ -n $dup ]]; then
	echo "test packages whose import paths end alike (one test binary name): $dup" >&2
	exit 1
fi
echo "== compiling the test binaries of $*"
mapfile -t pkgs < <(awk '{print $1}' "$out/packages")
go test -vet=off -p "${INTEGRATION_P:-4}" -c -o "$out/" "${pkgs[@]}"
echo "== running $(wc -l <"$out/packages") test binaries, $runs at a time"

run() { # import-path dir
	local pkg=$1 dir=$2
	local name=${pkg//\//_}
	local log=$out/logs/$name.log start=$SECONDS rc=0
	(cd "$dir" && exec "$out/${pkg##*/}.test" -test.paniconexit0 -test.timeout="$timeout" "${flags[@]}") >"$log" 2>&1 || rc=$?
	echo "$rc" >"$out/logs/$name.rc"
	# One package's output at a time, whole.
	{
		flock 9
		if ((rc != 0 || verbose)); then cat "$log"; fi
		if ((rc == 0)); then
			printf 'ok  \t%s\t%ds\n' "$pkg" $((SECONDS - start))
		else
			printf 'FAIL\t%s\t%ds (exit %d)\n' "$pkg" $((SECONDS - start)) "$rc"
		fi
	} 9>>"$out/print.lock"
}

while read -r pkg dir; do
	while (($(jobs -rp | wc -l) >= runs)); do wait -n || true; done
	run "$pkg" "$dir" </dev/null &
done <"$out/packages"
wait

failed=0
while read -r pkg _; do
	if [[ $(cat "$out/logs/${pkg//\//_}.rc" 2>/dev/null) != 0 ]]; then
		((failed += 1))
		echo "FAIL $pkg (log: bin/test-binaries/logs/${pkg//\//_}.log)" >&2
	fi
done <"$out/packages"
if ((failed)); then
	echo "$failed of $(wc -l <"$out/packages") test packages failed" >&2
	exit 1
fi
