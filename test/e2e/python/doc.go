// Package pythone2e tests the Python client and Scrapy middleware
// (clients/python) against the dev environment: real operator, real Squid
// proxies, Debian's python3-scrapy. It also checks that `pip install
// clients/python` works offline.
package pythone2e
