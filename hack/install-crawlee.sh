#!/usr/bin/env bash
# Installs the real clients of test/e2e/crawlee, if missing: Debian's
# chromium, and Crawlee with playwright-core (which downloads no browser)
# from npm at the versions test/e2e/crawlee/testdata/package-lock.json pins,
# into bin/crawlee/node_modules. Needs Node.js 20 or later and npm.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=$root/test/e2e/crawlee/testdata
dst=$root/bin/crawlee

if [[ ! -x /usr/bin/chromium ]]; then
	"$root/hack/apt-install.sh" chromium
fi
for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		"$root/hack/apt-install.sh" nodejs npm
		break
	fi
done
if cmp -s "$src/package-lock.json" "$dst/package-lock.json" && [[ -d $dst/node_modules/@crawlee/playwright ]]; then
	echo "crawlee is installed in bin/crawlee"
	exit 0
fi
mkdir -p "$dst"
cp "$src/package.json" "$src/package-lock.json" "$dst/"
# No browser download, ever: the crawl drives Debian's chromium.
(cd "$dst" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
echo "crawlee installed in bin/crawlee"
