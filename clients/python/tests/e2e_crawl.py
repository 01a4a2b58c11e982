"""Runs one Scrapy crawl through the middleware and writes its stats as JSON.

Driven by test/e2e/python (a Go test that starts the dev environment and the
sites) and by test_middleware.py (fakes); not a test module itself. Arguments:
a JSON file with "urls" (fetched once each, in order), "settings" (Scrapy
settings) and optionally "gap" (seconds: fetch the URLs one at a time, each
that long after the previous answer), and the output file. proxy_operator is
imported from PYTHONPATH (clients/python) or an installed package.
"""

import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.utils.defer import maybe_deferred_to_future


def is_captcha(response, request):
    """A ban predicate (PROXY_OPERATOR_BAN_PREDICATE="e2e_crawl.is_captcha"):
    a 200 whose page is a captcha."""
    return b"captcha" in response.body


class Fetch(scrapy.Spider):
    name = "proxy-operator-e2e"

    def __init__(self, urls, gap=None, **kwargs):
        super().__init__(**kwargs)
        self.urls = urls
        self.gap = gap
        self.seen = []

    def start_requests(self):
        if self.gap is None:
            for url in self.urls:
                yield scrapy.Request(url, dont_filter=True)
        elif self.urls:
            yield scrapy.Request(self.urls[0], dont_filter=True, cb_kwargs={"i": 0})

    async def parse(self, response, i=None):
        self.seen.append({"url": response.url, "status": response.status, "proxy": response.meta.get("proxy")})
        if self.gap is not None and i + 1 < len(self.urls):
            from twisted.internet import reactor, task
            await maybe_deferred_to_future(task.deferLater(reactor, self.gap, lambda: None))
            yield scrapy.Request(self.urls[i + 1], dont_filter=True, cb_kwargs={"i": i + 1})


def main():
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator.middleware.ProxyOperatorMiddleware": 610},
        "RETRY_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "HTTPERROR_ALLOW_ALL": True,
    }
    settings.update(cfg["settings"])
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(Fetch)
    process.crawl(crawler, urls=cfg["urls"], gap=cfg.get("gap"))
    process.start()
    from twisted.internet import reactor
    out = {"stats": {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str))},
           "seen": crawler.spider.seen, "reactor": type(reactor).__name__}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, default=str)


if __name__ == "__main__":
    main()
