// A crawl as a Crawlee user writes it: PlaywrightCrawler with Crawlee's
// defaults (a session pool, one browser shared by its pages, a blocked
// status retried on a new session), each Crawlee session a sticky session
// of the gateway. test/e2e/crawlee runs it against the dev environment.
//
// Environment: GATEWAY (host:port), TOKEN (the lease API token), START (the
// first URL), CHROMIUM (the browser), OUT (where the pages' answers go, as
// JSON).
import fs from 'node:fs';
import { Configuration, PlaywrightCrawler, ProxyConfiguration } from '@crawlee/playwright';
import { chromium } from 'playwright-core';

const { GATEWAY, TOKEN, START, CHROMIUM, OUT } = process.env;
const pages = [];
const crawler = new PlaywrightCrawler({
    proxyConfiguration: new ProxyConfiguration({
        newUrlFunction: (sessionId) => `http://session-${sessionId}.wait-30:${TOKEN}@${GATEWAY}`,
    }),
    maxRequestRetries: 4,
    maxConcurrency: 4,
    launchContext: {
        launcher: chromium,
        launchOptions: {
            executablePath: CHROMIUM,
            // As a crawler runs it in a container: no sandbox, no GPU; QUIC
            // off so that HTTPS goes through the proxy.
            args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run'],
        },
    },
    postNavigationHooks: [async ({ request, response, session }) => {
        const headers = response ? response.headers() : {};
        pages.push({
            url: request.url, retry: request.retryCount, status: response ? response.status() : 0,
            via: headers.via || '', lease: headers['x-proxy-lease-id'] || '', session: session ? session.id : '',
        });
    }],
    async requestHandler({ enqueueLinks }) {
        await enqueueLinks({ strategy: 'same-origin' });
    },
    failedRequestHandler({ request }, error) {
        pages.push({ url: request.url, failed: String(error) });
    },
}, new Configuration({ persistStorage: false }));

await crawler.run([START]);
fs.writeFileSync(OUT, JSON.stringify(pages));
