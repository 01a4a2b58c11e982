"""A standard-library client of the proxy-operator HTTP API (docs/api.md)."""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .errors import APIError, NotLeader, QueueFull, TransportError, Unavailable, error_from_response

#: The environment variable the token is read from when none is given.
TOKEN_ENV = "PROXY_OPERATOR_TOKEN"

#: Report results.
OK = "ok"
RATE_LIMITED = "rate_limited"
BANNED = "banned"


@dataclass(frozen=True)
class Proxy:
    """A proxy as the API shows it."""

    name: str
    namespace: str
    #: For a lease, with the lease's proxy credentials as userinfo (kept out of repr and logs).
    url: str = field(repr=False)
    host: str
    port: int
    attributes: Dict[str, str] = field(default_factory=dict)
    latency_millis: Optional[int] = None
    healthy: Optional[bool] = None
    active_leases: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Proxy":
        return cls(
            name=d.get("name", ""), namespace=d.get("namespace", ""), url=d.get("url", ""),
            host=d.get("host", ""), port=int(d.get("port", 0) or 0),
            attributes=dict(d.get("attributes") or {}), latency_millis=d.get("latencyMillis"),
            healthy=d.get("healthy"), active_leases=d.get("activeLeases"),
        )


@dataclass
class Lease:
    """A granted lease. ``proxy.url`` is what to send requests through."""

    lease_id: str
    proxy: Proxy
    expires_at: str
    ttl_seconds: int
    target: str = ""
    #: False while the leased proxy fails its health probes (None: the server did not say).
    proxy_healthy: Optional[bool] = None
    #: True while the proxy's ProxyPool removes it: the lease lasts until released; move when you can.
    proxy_draining: bool = False
    #: The tier of the request's ``selectors`` the lease was granted on (0: the first, or no ladder).
    tier: int = 0
    #: When the client received it (``time.monotonic()``), for renewal timing.
    received_at: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        return self.proxy.url

    def seconds_left(self, now: Optional[float] = None) -> float:
        """Seconds until the lease ends, by the client's clock since it was received."""
        now = time.monotonic() if now is None else now
        return self.ttl_seconds - (now - self.received_at)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], target: str = "") -> "Lease":
        return cls(lease_id=d["leaseID"], proxy=Proxy.from_json(d.get("proxy") or {}),
                   expires_at=d.get("expiresAt", ""), ttl_seconds=int(d.get("ttlSeconds", 0) or 0), target=target,
                   proxy_healthy=d.get("proxyHealthy"), proxy_draining=bool(d.get("proxyDraining", False)),
                   tier=int(d.get("tier", 0) or 0))


class Client:
    """Client of the HTTP API.

    Args:
        base_url: e.g. ``https://proxy-operator-discovery.proxy-operator-system.svc:8090``
            or the contents of ``.dev/discovery-url``.
        token: the bearer token; default ``$PROXY_OPERATOR_TOKEN``.
        ca_file: CA bundle that verifies an ``https://`` server (default: the system's).
        timeout: seconds for one HTTP exchange beyond any wait the request asks for.
        queue_full_retries: how often :meth:`lease` retries a ``429 queue_full``, sleeping
            ``Retry-After`` between tries, before it raises :class:`QueueFull`.
        retry_for: for how many seconds (of sleeping between tries) a call is retried while no
            replica answers it: ``503 not_leader`` or ``unavailable`` (a leader handover: about 3 s
            planned, 18 s after a crash) and transient connection failures. A lease request is
            retried on a connection failure only when the connection was refused (it may have been
            granted otherwise). ``0`` turns retries off.
        sleep: the sleep function (tests inject their own).
    """

    def __init__(self, base_url: str, token: Optional[str] = None, *, ca_file: Optional[str] = None,
                 timeout: float = 30.0, queue_full_retries: int = 3, retry_for: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        self.base_url = base_url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.timeout = timeout
        self.queue_full_retries = queue_full_retries
        self.retry_for = retry_for
        self._sleep = sleep
        self._ssl: Optional[ssl.SSLContext] = None
        if self.base_url.startswith("https://"):
            self._ssl = ssl.create_default_context(cafile=ca_file)
            self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2

    # --- calls ---

    def list_proxies(self, attributes: Optional[Mapping[str, str]] = None, healthy: Optional[bool] = None,
                     namespace: Optional[str] = None) -> List[Proxy]:
        """``GET /v1/proxies``: proxies whose attributes match, optionally only (un)healthy ones."""
        q: List[tuple] = [(f"attr.{k}", v) for k, v in sorted((attributes or {}).items())]
        if healthy is not None:
            q.append(("healthy", "true" if healthy else "false"))
        if namespace:
            q.append(("namespace", namespace))
        path = "/v1/proxies" + ("?" + urllib.parse.urlencode(q) if q else "")
        body = self._call("GET", path)
        return [Proxy.from_json(p) for p in body.get("proxies") or []]

    def lease(self, selector: Optional[Mapping[str, str]] = None, target: str = "", ttl_seconds: int = 0,
              wait_seconds: int = 0, priority: int = 0, flow: str = "", namespace: str = "",
              selectors: Optional[Sequence[Mapping[str, str]]] = None) -> Lease:
        """``POST /v1/leases``: leases one proxy.

        ``selectors``, instead of ``selector``, is a ladder of proxy tiers, cheapest first (at
        most 4): the lease is granted on the first tier that can serve ``target`` and climbs to
        the next only when every proxy of a tier cools for it; :attr:`Lease.tier` says which.

        With ``wait_seconds`` the server queues the request until a proxy frees up (fairly
        across flows) and answers :class:`NoMatch` only when the wait runs out. A full queue
        (:class:`QueueFull`) is retried after its ``Retry-After``, ``queue_full_retries`` times.
        """
        req: Dict[str, Any] = {}
        if selector and selectors:
            raise ValueError("selector and selectors are exclusive: put the selector first in selectors")
        if selector:
            req["selector"] = dict(selector)
        if selectors:
            req["selectors"] = [dict(s) for s in selectors]
        for k, v in (("target", target), ("namespace", namespace), ("flow", flow)):
            if v:
                req[k] = v
        for k, v in (("ttlSeconds", ttl_seconds), ("waitSeconds", wait_seconds), ("priority", priority)):
            if v:
                req[k] = int(v)
        attempt = 0
        while True:
            try:
                body = self._call("POST", "/v1/leases", req, extra_timeout=wait_seconds, idempotent=False)
                return Lease.from_json(body, target=target)
            except QueueFull as e:
                if attempt >= self.queue_full_retries:
                    raise
                attempt += 1
                self._sleep(e.retry_after)

    def get(self, lease: "Lease | str") -> Lease:
        """``GET /v1/leases/{id}``: the lease as it is now. Its proxy's address follows a replaced
        instance and ``proxy_healthy`` its probes; a lease whose Proxy was deleted raises
        ``LeaseEnded`` saying so."""
        lease_id, target = _id_and_target(lease)
        return Lease.from_json(self._call("GET", f"/v1/leases/{_quote(lease_id)}", None), target=target)

    def renew(self, lease: "Lease | str", ttl_seconds: int = 0) -> Lease:
        """``POST /v1/leases/{id}/renew``: extends a live lease (``0``: its current TTL)."""
        lease_id, target = _id_and_target(lease)
        body = self._call("POST", f"/v1/leases/{_quote(lease_id)}/renew", {"ttlSeconds": int(ttl_seconds)} if ttl_seconds else {})
        return Lease.from_json(body, target=target)

    def report(self, lease: "Lease | str", result: str, target: str = "") -> None:
        """``POST /v1/leases/{id}/report``: ``ok``, ``rate_limited`` or ``banned``.

        ``target`` defaults, on the server, to the lease's target.
        """
        lease_id, _ = _id_and_target(lease)
        req: Dict[str, Any] = {"result": result}
        if target:
            req["target"] = target
        self._call("POST", f"/v1/leases/{_quote(lease_id)}/report", req)

    def release(self, lease: "Lease | str") -> None:
        """``DELETE /v1/leases/{id}``: idempotent."""
        lease_id, _ = _id_and_target(lease)
        self._call("DELETE", f"/v1/leases/{_quote(lease_id)}")

    def leased(self, **kwargs: Any) -> "LeaseContext":
        """A context manager that leases on entry and releases on exit::

            with client.leased(selector={"tier": "standard"}, target="example.com") as lease:
                requests.get(url, proxies={"http": lease.url, "https": lease.url})
        """
        return LeaseContext(self, kwargs)

    # --- transport ---

    #: Backoff between retries of a call no replica answered: first and longest sleep, in seconds.
    RETRY_FIRST, RETRY_MAX = 0.5, 5.0

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
              extra_timeout: float = 0, idempotent: bool = True) -> Dict[str, Any]:
        """One call, retried for ``retry_for`` seconds while no replica answers it."""
        slept, delay = 0.0, self.RETRY_FIRST
        while True:
            try:
                return self._call_once(method, path, body, extra_timeout)
            except (Unavailable, TransportError) as e:
                if isinstance(e, TransportError) and not (e.transient and (idempotent or e.refused)):
                    raise
                if slept + delay > self.retry_for:
                    raise
                self._sleep(delay)
                slept += delay
                delay = min(delay * 2, self.RETRY_MAX)

    def _call_once(self, method: str, path: str, body: Optional[Mapping[str, Any]],
                   extra_timeout: float) -> Dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout + extra_timeout, context=self._ssl) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                decoded = json.loads(raw) if raw else {}
            except ValueError:
                decoded = {"message": raw.decode(errors="replace")[:200]}
            if not isinstance(decoded, dict):
                decoded = {}
            raise error_from_response(e.code, decoded, e.headers.get("Retry-After")) from None
        except (urllib.error.URLError, OSError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            refused = isinstance(reason, ConnectionRefusedError)
            transient = isinstance(reason, (ConnectionError, TimeoutError)) and not isinstance(reason, ssl.SSLError)
            raise TransportError(f"{method} {self.base_url}{path}: {reason}", refused=refused, transient=transient) from e
        if not raw:
            return {}
        decoded = json.loads(raw)
        return decoded if isinstance(decoded, dict) else {}


class LeaseContext:
    """What :meth:`Client.leased` returns; the lease is released on exit, whatever happened."""

    def __init__(self, client: Client, kwargs: Mapping[str, Any]) -> None:
        self._client = client
        self._kwargs = dict(kwargs)
        self.lease: Optional[Lease] = None

    def __enter__(self) -> Lease:
        self.lease = self._client.lease(**self._kwargs)
        return self.lease

    def __exit__(self, *exc: Any) -> None:
        if self.lease is not None:
            try:
                self._client.release(self.lease)
            except APIError:
                pass  # release is idempotent; an error here must not hide the body's


def _id_and_target(lease: "Lease | str") -> tuple:
    if isinstance(lease, Lease):
        return lease.lease_id, lease.target
    return str(lease), ""


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")
