// Command http-crawler is a minimal crawler outside the cluster: it leases a
// proxy from the discovery API, fetches one URL through it, reports how that
// went (ok, rate_limited on 429, banned on 403) and releases the lease.
//
//	export PROXY_OPERATOR_URL=$(cat .dev/discovery-url) PROXY_OPERATOR_TOKEN=$(cat .dev/discovery-token)
//	export PROXY_OPERATOR_CA_FILE=.dev/ca.crt
//	go run ./examples/http-crawler -url https://example.com/ -selector region=eu
//
// The same variables as the Python client's; DISCOVERY_URL, DISCOVERY_TOKEN
// and DISCOVERY_CA_FILE, which it read before, still work.
package main
