"""Runs one Scrapy crawl through the middleware and writes its stats as JSON.

Driven by test/e2e/python (a Go test that starts the dev environment and the
sites); not a unittest module. Arguments: a JSON file with "urls" (fetched once
each, in order) and "settings" (Scrapy settings), and the output file.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import scrapy  # noqa: E402
from scrapy.crawler import CrawlerProcess  # noqa: E402


def is_captcha(response, request):
    """A ban predicate (PROXY_OPERATOR_BAN_PREDICATE="e2e_crawl.is_captcha"):
    a 200 whose page is a captcha."""
    return b"captcha" in response.body


class Fetch(scrapy.Spider):
    name = "proxy-operator-e2e"

    def __init__(self, urls, **kwargs):
        super().__init__(**kwargs)
        self.urls = urls
        self.seen = []

    def start_requests(self):
        for url in self.urls:
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response):
        self.seen.append({"url": response.url, "status": response.status, "proxy": response.meta.get("proxy")})


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
    process.crawl(crawler, urls=cfg["urls"])
    process.start()
    from twisted.internet import reactor
    out = {"stats": {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str))},
           "seen": crawler.spider.seen, "reactor": type(reactor).__name__}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, default=str)


if __name__ == "__main__":
    main()
