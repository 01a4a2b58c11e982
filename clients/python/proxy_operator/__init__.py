"""Client of the proxy-operator HTTP API, and a Scrapy downloader middleware.

The client (:class:`Client`) needs only the standard library; the middleware
(:mod:`proxy_operator.middleware`) needs Scrapy.
"""

from .client import BANNED, OK, RATE_LIMITED, TOKEN_ENV, Client, Lease, LeaseContext, Proxy
from .errors import (CODES, APIError, BodyTooLarge, CooldownLimit, Forbidden, InvalidRequest, InvalidResult,
                     LeaseEnded, MethodNotAllowed, NoMatch, NoRoom, NotFound, NotLeader, QueueFull, ServerError,
                     TransportError, TTLTooLong, Unauthorized, Unavailable, UnknownLease)

__all__ = [
    "APIError", "BANNED", "BodyTooLarge", "CODES", "Client", "CooldownLimit", "Forbidden", "InvalidRequest",
    "InvalidResult", "Lease", "LeaseContext", "LeaseEnded", "MethodNotAllowed", "NoMatch", "NoRoom", "NotFound",
    "NotLeader", "OK", "Proxy", "QueueFull", "RATE_LIMITED", "ServerError", "TOKEN_ENV", "TTLTooLong",
    "TransportError", "Unauthorized", "Unavailable", "UnknownLease",
]
__version__ = "0.1.0"
