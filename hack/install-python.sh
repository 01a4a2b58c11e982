#!/usr/bin/env bash
# Installs Debian's python3-scrapy and python3-pytest if Debian's python3
# lacks Scrapy or pytest. The Python client's tests (pytest) and e2e tests
# (test/e2e/python) run real Scrapy spiders through the middleware in
# clients/python.
set -euo pipefail

py=/usr/bin/python3
if [[ -x $py ]] && "$py" -c 'import scrapy, pytest' >/dev/null 2>&1; then
	echo "python3-scrapy and python3-pytest are installed"
	exit 0
fi
"$(dirname "$0")/apt-install.sh" python3-scrapy python3-pytest python3-pip python3-setuptools
