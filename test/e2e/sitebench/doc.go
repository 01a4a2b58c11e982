// Package sitebench measures a SitePolicy against a site that limits its
// total rate (docs/sites.md, docs/benchmarks.md "Site politeness"): crawler
// workers fetch one local origin through leases of real Squids, once each
// throttling on its own as the frameworks do (the baseline: no policy) and
// once under a SitePolicy; the origin halves its rate halfway. The ladder's
// benchmark crawls a site that refuses every proxy of the cheap tier for a
// while, with the ladder cheap, premium under a budget on the premium tier
// (docs/benchmarks.md, "The ladder of proxy tiers").
//
// It runs only as a benchmark (make bench-sites), talks only to loopback,
// and imports what a crawler and the operator's lease path are made of.
package sitebench
