#!/usr/bin/env bash
# Builds the pinned staticcheck (hack/tools/lint/go.mod) into bin/, kept while
# its stamp names the pinned version.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin="${BIN_DIR:-$root/bin}"
mkdir -p "$bin"

version=$(cd "$here" && go list -m -f '{{.Version}}' honnef.co/go/tools)
stamp="$bin/.staticcheck.version"
if [[ -x "$bin/staticcheck" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
	exit 0
fi
echo "building bin/staticcheck $version"
(cd "$here" && go build -trimpath -o "$bin/staticcheck" honnef.co/go/tools/cmd/staticcheck)
echo "$version" >"$stamp"
