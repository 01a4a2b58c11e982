"""Typed errors of the proxy-operator HTTP API.

Every error answer of the API is JSON ``{"error": code, "message": text, ...}``;
:func:`error_from_response` turns one into the exception class of its code, so
callers catch what they can handle (``except NoMatch``) and read the rest of
the body from the exception.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class APIError(Exception):
    """An error answer of the API.

    Attributes:
        status: the HTTP status code.
        code: the API's stable error code (``"no_match"``, ``"queue_full"``, ...).
        message: the API's human-readable message.
        body: the whole decoded error body.
    """

    def __init__(self, status: int, code: str, message: str, body: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body: Dict[str, Any] = dict(body or {})


class InvalidRequest(APIError):
    """400: the request breaks a rule (``invalid_json``, ``invalid_request``, ``invalid_query``)."""


class TTLTooLong(InvalidRequest):
    """400 ``ttl_too_long``: ``max_ttl_seconds`` is the server's maximum."""

    @property
    def max_ttl_seconds(self) -> Optional[int]:
        v = self.body.get("maxTtlSeconds")
        return int(v) if v is not None else None


class InvalidResult(InvalidRequest):
    """400 ``invalid_result``: a report's result is not ok, rate_limited or banned."""


class Unauthorized(APIError):
    """401: the bearer token is missing or wrong."""


class Forbidden(APIError):
    """403 ``forbidden``: the lease, or the namespace, is not the caller's."""


class CooldownLimit(Forbidden):
    """403 ``cooldown_limit``: the lease's holder already runs the most cooldowns it may; nothing was
    recorded. Retry the report once one of them ends (within a cooldown window)."""


class MethodNotAllowed(APIError):
    """405 ``method_not_allowed``: the route takes another method (a client bug)."""


class UnknownLease(APIError):
    """404 ``unknown_lease``: no such lease (or it ended more than a cooldown window ago)."""


class NotFound(APIError):
    """404 ``not_found``: no such route (a wrong base URL, usually)."""


class NoMatch(APIError):
    """409 ``no_match``: no proxy can take the lease now.

    The counts say why; they add up: ``considered = at_capacity + in_cooldown +
    unhealthy + free``. ``queued_ahead`` counts this flow's earlier requests for
    the same target and selector that wait ahead of this one: when it is over
    0 the request was refused because of them, not because the fleet is busy.
    ``site_policy`` names the SitePolicy whose budget for the target's site is
    in use ("" if none held the lease back): the proxies may then be free.
    ``tier``, for a request with ``selectors``, is the tier of its ladder the
    counts are of (0: the first; past it, every proxy of the tiers before cools
    for the target).
    """

    def _count(self, key: str) -> int:
        return int(self.body.get(key, 0) or 0)

    @property
    def considered(self) -> int:
        return self._count("considered")

    @property
    def at_capacity(self) -> int:
        return self._count("atCapacity")

    @property
    def in_cooldown(self) -> int:
        return self._count("inCooldown")

    @property
    def unhealthy(self) -> int:
        return self._count("unhealthy")

    @property
    def free(self) -> int:
        return self._count("free")

    @property
    def queued_ahead(self) -> int:
        return self._count("queuedAhead")

    @property
    def site_policy(self) -> str:
        return str(self.body.get("sitePolicy") or "")

    @property
    def tier(self) -> int:
        return self._count("tier")


class NoRoom(APIError):
    """409 ``no_room``: a lease lost in an operator crash cannot come back, its proxy has been leased
    to capacity since; acquire a new one."""


class LeaseEnded(APIError):
    """410 ``lease_ended``: the lease was released, expired or its Proxy was deleted (the message
    says which); lease again."""


class BodyTooLarge(APIError):
    """413 ``body_too_large``."""


class QueueFull(APIError):
    """429 ``queue_full``: a wait queue is full. ``retry_after`` is in seconds."""

    def __init__(self, status: int, code: str, message: str, body: Optional[Mapping[str, Any]] = None,
                 retry_after: float = 1.0) -> None:
        super().__init__(status, code, message, body)
        self.retry_after = retry_after


class Unavailable(APIError):
    """503 ``unavailable``: the server cannot answer now; retry."""


class NotLeader(Unavailable):
    """503 ``not_leader``: this replica does not serve leases now (a handover: about 3 seconds planned,
    18 after a crash). ``leader`` names the one that does, when known. The client retries it for
    ``retry_for`` seconds before raising it."""

    @property
    def leader(self) -> str:
        return str(self.body.get("leader") or "")


class ServerError(APIError):
    """5xx other than 503 (``internal``): a bug on the server; safe to retry."""


class TransportError(APIError):
    """No answer: the connection failed, was refused or timed out (``status`` 0, ``code``
    ``"transport"``; ``__cause__`` is the underlying error). Retried for ``retry_for`` seconds
    when it is safe (any call but a lease whose request may have reached the server)."""

    def __init__(self, message: str, refused: bool = False, transient: bool = False) -> None:
        super().__init__(0, "transport", message)
        #: True when the connection was refused: the request never reached a server.
        self.refused = refused
        #: True for a failure a retry may cure (refused, reset, timed out); False for one it cannot
        #: (a certificate that does not verify, a name that does not resolve).
        self.transient = transient or refused


_BY_CODE: Dict[str, Type[APIError]] = {
    "invalid_json": InvalidRequest,
    "invalid_request": InvalidRequest,
    "invalid_query": InvalidRequest,
    "ttl_too_long": TTLTooLong,
    "invalid_result": InvalidResult,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "cooldown_limit": CooldownLimit,
    "unknown_lease": UnknownLease,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "no_match": NoMatch,
    "no_room": NoRoom,
    "lease_ended": LeaseEnded,
    "body_too_large": BodyTooLarge,
    "queue_full": QueueFull,
    "unavailable": Unavailable,
    "not_leader": NotLeader,
    "internal": ServerError,
}

#: Every error code of the API (pkg/discovery/wire): a test holds this to the Go constants.
CODES = frozenset(_BY_CODE)

_BY_STATUS: Dict[int, Type[APIError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: UnknownLease, 405: MethodNotAllowed,
    409: NoMatch, 410: LeaseEnded, 413: BodyTooLarge, 429: QueueFull, 503: Unavailable,
}


def error_from_response(status: int, body: Optional[Mapping[str, Any]], retry_after: Optional[str] = None) -> APIError:
    """Returns the exception for an error answer: by the body's code, else by status."""
    body = dict(body or {})
    code = str(body.get("error") or "")
    message = str(body.get("message") or "")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    if not code:
        code = f"http_{status}"
    if cls is QueueFull:
        return QueueFull(status, code, message, body, retry_after=_parse_retry_after(retry_after))
    return cls(status, code, message, body)


def _parse_retry_after(v: Optional[str]) -> float:
    try:
        return max(0.0, float(v)) if v is not None else 1.0
    except ValueError:
        return 1.0
