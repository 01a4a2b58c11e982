"""A Scrapy spider that knows nothing of proxy-operator: the gateway is its
proxy, given as Scrapy users give any proxy (http_proxy in the environment,
HttpProxyMiddleware sends the userinfo as Proxy-Authorization)."""
import os

import scrapy


class GatewaySpider(scrapy.Spider):
    name = "gateway"
    custom_settings = {"HTTPPROXY_ENABLED": True, "RETRY_ENABLED": False, "LOG_LEVEL": "WARNING"}

    def start_requests(self):
        for url in os.environ["GATEWAY_SPIDER_URLS"].split():
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "status": response.status, "body": response.text,
               "lease": response.headers.get("X-Proxy-Lease-ID", b"").decode()}
