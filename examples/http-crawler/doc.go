// Command http-crawler is a minimal crawler outside the cluster: it leases a
// proxy from the discovery API, fetches one URL through it, reports how that
// went (ok, rate_limited on 429, banned on 403) and releases the lease.
//
//	export DISCOVERY_URL=http://localhost:8090 DISCOVERY_TOKEN=$(cat .dev/discovery-token)
//	go run ./examples/http-crawler -url https://example.com/ -selector region=eu
package main
