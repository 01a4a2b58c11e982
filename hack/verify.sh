#!/usr/bin/env bash
# make verify: generated code is up to date (regenerating changes no file and
# adds none), every Go file is gofmt'ed, go vet is clean. Works in a fresh
# clone: it needs neither bin/ nor .dev/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Content hashes of every tracked and untracked (not ignored) file. Comparing
# them before and after `make generate` catches modified, added and deleted
# files. In a clean clone (CI) that is exactly `git diff --exit-code` plus
# "no new untracked files"; in a working tree with uncommitted edits it still
# only blames what generate changed.
snapshot() {
	git ls-files -z --cached --others --exclude-standard | sort -zu |
		while IFS= read -r -d '' f; do
			if [[ -f $f ]]; then sha256sum -- "$f"; else echo "deleted  $f"; fi
		done
}

failed=0
before=$(mktemp)
after=$(mktemp)
trap 'rm -f "$before" "$after"' EXIT

echo "== make generate"
snapshot >"$before"
make --no-print-directory generate
snapshot >"$after"
if ! diff -q "$before" "$after" >/dev/null; then
	echo "generated files are stale; run 'make generate' and commit. Changed:" >&2
	{ diff "$before" "$after" || true; } | awk '/^[<>]/ {print "  " $NF}' | sort -u >&2
	failed=1
fi

echo "== gofmt"
unformatted=$(git ls-files -z --cached --others --exclude-standard -- '*.go' |
	while IFS= read -r -d '' f; do
		if [[ -f $f ]]; then gofmt -l -- "$f"; fi
	done)
if [[ -n $unformatted ]]; then
	echo "not gofmt'ed (run gofmt -w):" >&2
	sed 's/^/  /' <<<"$unformatted" >&2
	failed=1
fi

echo "== go vet"
go vet ./... || failed=1

if [[ $failed -ne 0 ]]; then
	echo "verify: FAILED" >&2
	exit 1
fi
echo "verify: OK"
