"""Client of the proxy-operator HTTP API, and a Scrapy downloader middleware.

The client (:class:`Client`) needs only the standard library; the middleware
(:mod:`proxy_operator.middleware`) needs Scrapy.
"""

from .client import BANNED, OK, RATE_LIMITED, TOKEN_ENV, Client, Lease, LeaseContext, Proxy
from .errors import (APIError, BodyTooLarge, Forbidden, InvalidRequest, InvalidResult, LeaseEnded, NoMatch,
                     NotFound, QueueFull, ServerError, TTLTooLong, Unauthorized, Unavailable, UnknownLease)

__all__ = [
    "APIError", "BANNED", "BodyTooLarge", "Client", "Forbidden", "InvalidRequest", "InvalidResult", "Lease",
    "LeaseContext", "LeaseEnded", "NoMatch", "NotFound", "OK", "Proxy", "QueueFull", "RATE_LIMITED",
    "ServerError", "TOKEN_ENV", "TTLTooLong", "Unauthorized", "Unavailable", "UnknownLease",
]
__version__ = "0.1.0"
