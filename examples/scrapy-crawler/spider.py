"""A Scrapy spider that crawls through proxies leased from proxy-operator.

Against `make dev`, from the repository root:

    PYTHONPATH=clients/python \\
    PROXY_OPERATOR_URL=$(cat .dev/discovery-url) PROXY_OPERATOR_TOKEN=$(cat .dev/discovery-token) \\
    PROXY_OPERATOR_CA_FILE=.dev/ca.crt \\
    /usr/bin/python3 -m scrapy runspider examples/scrapy-crawler/spider.py \\
        -a start=http://127.0.0.1:8088/ -a pages=5 -o pages.json

Each page is fetched through a leased proxy (the item's ``proxy``); a 429 or a
ban moves the request to another proxy; every lease is released at the end.
"""

import os

import scrapy


class LeasedSpider(scrapy.Spider):
    name = "leased"

    custom_settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator.middleware.ProxyOperatorMiddleware": 610},
        "PROXY_OPERATOR_URL": os.environ.get("PROXY_OPERATOR_URL", ""),
        # The CA that verifies an https:// URL (the system's when unset).
        "PROXY_OPERATOR_CA_FILE": os.environ.get("PROXY_OPERATOR_CA_FILE", ""),
        # The token comes from $PROXY_OPERATOR_TOKEN.
        "PROXY_OPERATOR_SELECTOR": {"tier": os.environ.get("PROXY_TIER", "standard")},
        "PROXY_OPERATOR_TTL": 120,
        "PROXY_OPERATOR_WAIT": 30,
        "PROXY_OPERATOR_BAN_CODES": [403],
        "ROBOTSTXT_OBEY": False,
        "HTTPERROR_ALLOW_ALL": True,
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(self, start="http://127.0.0.1:8088/", pages="5", **kwargs):
        super().__init__(**kwargs)
        self.start = start.rstrip("/")
        self.pages = int(pages)

    def start_requests(self):
        for i in range(self.pages):
            yield scrapy.Request(f"{self.start}/page/{i}", dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "status": response.status, "proxy": response.meta.get("proxy"),
               "body": response.text[:80]}
