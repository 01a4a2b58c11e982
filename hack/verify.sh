#!/usr/bin/env bash
# make verify: generated code is up to date (regenerating changes no file and
# adds none), every Go file is gofmt'ed, go vet and staticcheck are clean, and
# no tracked file is over 1 MB or an executable binary. Works in a fresh
# clone: it needs neither bin/ nor .dev/ (staticcheck is built into bin/ from
# its pinned module, hack/tools/lint).
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

echo "== staticcheck"
hack/tools/install.sh lint
# Generated clients follow their generator's API choices (client-go's
# deprecated ListFunc), so they are not ours to lint.
mapfile -t pkgs < <(go list ./... | grep -v '/pkg/generated/')
bin/staticcheck "${pkgs[@]}" || failed=1

echo "== the tools' modules use the product's versions of the modules they share"
hack/tools/align.sh -check || failed=1

echo "== tracked files: none over 1 MB, no executable binaries"
# A forge refuses files over 100 MB and every clone carries every version
# of a binary; build outputs go to bin/ (ignored).
while IFS= read -r -d '' f; do
	[[ -f $f ]] || continue
	size=$(stat -c %s -- "$f")
	if ((size > 1048576)); then
		echo "  $f is $size bytes (limit 1 MB)" >&2
		failed=1
	fi
	case $(head -c 4 -- "$f" | od -An -tx1 | tr -d ' ') in
	7f454c46 | cffaedfe | cefaedfe | 4d5a*)
		echo "  $f is an executable binary: build it into bin/ instead" >&2
		failed=1
		;;
	esac
done < <(git ls-files -z --cached --others --exclude-standard)

if [[ $failed -ne 0 ]]; then
	echo "verify: FAILED" >&2
	exit 1
fi
echo "verify: OK"
