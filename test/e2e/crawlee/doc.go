// Package crawleee2e crawls a local site through the gateway with a real
// browser crawler, as the issue that found the bug did: Crawlee's
// PlaywrightCrawler (npm, the versions testdata/package-lock.json pins,
// installed by hack/install-crawlee.sh into bin/crawlee) driving Debian's
// Chromium, each Crawlee session a sticky session of the gateway, against
// the dev environment with two operator replicas. A page the site answers
// 429 is retried by Crawlee; no request may reach the site through the proxy
// that got the 429 while it cools for the site.
//
// It imports the product's test tooling; nothing imports it.
package crawleee2e
