"""A Scrapy downloader middleware that sends requests through leased proxies.

Enable it in the project's settings::

    DOWNLOADER_MIDDLEWARES = {"proxy_operator.middleware.ProxyOperatorMiddleware": 610}
    PROXY_OPERATOR_URL = "https://proxy-operator-discovery.proxy-operator-system.svc:8090"
    PROXY_OPERATOR_TOKEN = "..."            # or $PROXY_OPERATOR_TOKEN
    PROXY_OPERATOR_SELECTOR = {"tier": "standard"}

Per request domain (the URL's host name, which is also the lease's ``target``, so
cooldowns are per site) it holds up to ``PROXY_OPERATOR_LEASES_PER_DOMAIN``
leases and sets ``request.meta["proxy"]``. A busy fleet makes the request wait
(``PROXY_OPERATOR_WAIT`` seconds per try, the API's fair queue), never fail at
once. Leases are renewed before they expire (the renewal's proxy URL, with its
new credentials, is used from then on; a renewal that says the proxy is
draining moves the domain to another proxy), released when their domain has
been idle for ``PROXY_OPERATOR_IDLE_RELEASE`` seconds (so a spider crawling more
domains than there are proxies shares them), and all released before the spider
closes, including one granted to a wait still under way when the close began.
A ``429`` is reported ``rate_limited`` and a response the ban policy
matches ``banned``; that lease is dropped and the request retried on another
proxy (the proxy is cooling down for that site, so it is not handed back).

Waits are bounded per site. Before waiting, a lease is asked for without a
wait, and a wait is sent in pieces of at most ``PROXY_OPERATOR_SITE_RECHECK``
seconds. When a refusal says that no proxy is free or leased-but-usable and at
least one cools down for the site (``no_match`` with ``free`` and
``atCapacity`` 0, ``inCooldown`` over 0), no wait can help until a cooldown
ends: the site backs off for ``PROXY_OPERATOR_COOLING_BACKOFF`` seconds, during
which its requests are dropped at once (``IgnoreRequest``, counted
``site_cooling``) instead of holding Scrapy's concurrency from other sites.

Settings (all optional but the URL):

=====================================  ==========================================
``PROXY_OPERATOR_URL``                 base URL of the HTTP API
``PROXY_OPERATOR_TOKEN``               bearer token (default ``$PROXY_OPERATOR_TOKEN``)
``PROXY_OPERATOR_CA_FILE``             CA bundle for an ``https://`` URL
``PROXY_OPERATOR_SELECTOR``            dict of proxy attributes to match
``PROXY_OPERATOR_SELECTORS``           instead: a ladder of such dicts, cheapest first (at most 4); a
                                       site's leases climb to the next only when every proxy of one
                                       cools for the site (docs/sites.md)
``PROXY_OPERATOR_TTL``                 lease TTL in seconds (default 300)
``PROXY_OPERATOR_WAIT``                seconds one lease request may wait (default 30)
``PROXY_OPERATOR_LEASE_ATTEMPTS``      waits before a request is given up (default 20)
``PROXY_OPERATOR_LEASES_PER_DOMAIN``   leases held per domain, round-robin (default 1)
``PROXY_OPERATOR_IDLE_RELEASE``        idle seconds before a domain's leases go (default 5)
``PROXY_OPERATOR_BAN_CODES``           statuses reported ``banned`` (default ``[403]``)
``PROXY_OPERATOR_BAN_PREDICATE``       ``callable(response, request) -> bool`` or its dotted path
``PROXY_OPERATOR_MAX_RETRIES``         retries of one request on other proxies (default 5)
``PROXY_OPERATOR_COOLING_BACKOFF``     seconds a site every proxy cools for is given up (default 30)
``PROXY_OPERATOR_SITE_RECHECK``        longest single wait before the site is checked again (default 10)
``PROXY_OPERATOR_FLOW``, ``_PRIORITY`` fairness flow and priority band of the waits
``PROXY_OPERATOR_RETRY_FOR``           seconds an API call is retried, with backoff, while no replica
                                       answers (``503 not_leader``, connection refused; default 60,
                                       longer than a crash failover's 18)
=====================================  ==========================================

Scrapy stats: ``proxy_operator/leases_acquired``, ``leases_climbed`` (granted past a ladder's first
tier), ``leases_released``,
``leases_renewed``, ``leases_left_draining``, ``reports/rate_limited``, ``reports/banned``, ``retries``,
``proxy_auth_retries`` (requests the proxy answered 407, sent again with the current lease),
``no_match`` (wait pieces that ran out), ``site_budget`` (refusals because the
site's SitePolicy budget was in use: the request waits on), ``gave_up``, ``site_cooling`` (requests
dropped while their site backs off), ``errors`` and
``lease_wait_seconds_max`` (the longest a lease took to come).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import urlparse

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.misc import load_object
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import defer, task
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from .client import BANNED, RATE_LIMITED, Client, Lease
from .errors import APIError, LeaseEnded, NoMatch, UnknownLease

logger = logging.getLogger(__name__)

#: request.meta key holding the lease ID a request went out with.
META_LEASE = "proxy_operator_lease"
#: request.meta key counting the retries on other proxies.
META_RETRIES = "proxy_operator_retries"
#: request.meta key that makes the middleware leave a request alone.
META_SKIP = "proxy_operator_skip"

STATS = "proxy_operator/"


@dataclass
class _Domain:
    leases: List[Lease] = field(default_factory=list)
    acquiring: Optional[defer.Deferred] = None
    acquiring_waits: bool = False
    inflight: int = 0
    idle_call: Any = None
    next: int = 0
    # cooling_until: monotonic time before which the site's requests are
    # dropped (every proxy was cooling down for it).
    cooling_until: float = 0.0


#: What an acquire returns when every proxy cools down for its site.
_COOLING = object()


def site_cooling(err: NoMatch) -> bool:
    """Whether a ``no_match`` says that no wait can help the site until a cooldown ends:
    nothing free, nothing leased that could be handed over, and proxies cooling for it."""
    return err.free == 0 and err.at_capacity == 0 and err.in_cooldown > 0


class ProxyOperatorMiddleware:
    """See the module documentation."""

    def __init__(self, crawler: Any, client: Client) -> None:
        s = crawler.settings
        self.crawler = crawler
        self.stats = crawler.stats
        self.client = client
        self.selector: Dict[str, str] = dict(s.getdict("PROXY_OPERATOR_SELECTOR"))
        self.selectors: Optional[List[Dict[str, str]]] = [dict(t) for t in s.getlist("PROXY_OPERATOR_SELECTORS")] or None
        if self.selector and self.selectors:
            raise NotConfigured("PROXY_OPERATOR_SELECTOR and PROXY_OPERATOR_SELECTORS are exclusive: "
                                "put the selector first in the ladder")
        self.ttl = s.getint("PROXY_OPERATOR_TTL", 300)
        self.wait = s.getint("PROXY_OPERATOR_WAIT", 30)
        self.attempts = s.getint("PROXY_OPERATOR_LEASE_ATTEMPTS", 20)
        self.per_domain = max(1, s.getint("PROXY_OPERATOR_LEASES_PER_DOMAIN", 1))
        self.idle_release = s.getfloat("PROXY_OPERATOR_IDLE_RELEASE", 5.0)
        self.ban_codes = {int(c) for c in s.getlist("PROXY_OPERATOR_BAN_CODES", [403])}
        pred = s.get("PROXY_OPERATOR_BAN_PREDICATE")
        self.ban_predicate: Optional[Callable[[Any, Any], bool]] = load_object(pred) if isinstance(pred, str) else pred
        self.max_retries = s.getint("PROXY_OPERATOR_MAX_RETRIES", 5)
        self.cooling_backoff = s.getfloat("PROXY_OPERATOR_COOLING_BACKOFF", 30.0)
        self.recheck = max(1, s.getint("PROXY_OPERATOR_SITE_RECHECK", 10))
        self.flow = s.get("PROXY_OPERATOR_FLOW", "") or ""
        self.priority = s.getint("PROXY_OPERATOR_PRIORITY", 0)
        self.domains: Dict[str, _Domain] = {}
        # Waiting lease calls block a thread each for up to PROXY_OPERATOR_WAIT:
        # they get a pool of their own, so releases and reports (which free
        # the proxies the waits are for) never queue behind them.
        self._wait_pool = ThreadPool(minthreads=0, maxthreads=max(4, s.getint("CONCURRENT_REQUESTS", 16)), name="proxy-operator-wait")
        self._pool = ThreadPool(minthreads=0, maxthreads=4, name="proxy-operator")
        self._pending: set = set()
        self._renewer: Optional[task.LoopingCall] = None
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Any) -> "ProxyOperatorMiddleware":
        s = crawler.settings
        url = s.get("PROXY_OPERATOR_URL")
        if not url:
            raise NotConfigured("PROXY_OPERATOR_URL is not set")
        client = Client(url, s.get("PROXY_OPERATOR_TOKEN") or None, ca_file=s.get("PROXY_OPERATOR_CA_FILE") or None,
                        retry_for=s.getfloat("PROXY_OPERATOR_RETRY_FOR", 60.0))
        mw = cls(crawler, client)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    # --- signals ---

    def spider_opened(self, spider: Any) -> None:
        self._wait_pool.start()
        self._pool.start()
        self._renewer = task.LoopingCall(self._renew_due)
        self._renewer.start(max(1.0, self.ttl / 6), now=False)

    def spider_closed(self, spider: Any) -> defer.Deferred:
        """Releases every lease; the spider closes once they are released.

        Acquires still under way are waited for: a lease they bring is
        released too (``_acquire`` sees ``_closing``). Only then do the
        thread pools stop, so no release is left queued on a stopped pool."""
        self._closing = True
        if self._renewer is not None and self._renewer.running:
            self._renewer.stop()
        for d in self.domains.values():
            if d.idle_call is not None and d.idle_call.active():
                d.idle_call.cancel()
        for d in self.domains.values():
            leases, d.leases = d.leases, []
            for lease in leases:
                self._track(self._release(lease))

        def drain(_: Any = None) -> Any:
            # A pending acquire that ends in a grant adds its release to
            # _pending before it leaves: look again until nothing is left.
            if self._pending:
                return defer.DeferredList(list(self._pending), consumeErrors=True).addBoth(drain)
            self._wait_pool.stop()
            self._pool.stop()
            return None

        return defer.maybeDeferred(drain)

    # --- downloader middleware ---

    async def process_request(self, request: Any, spider: Any) -> None:
        if request.meta.get(META_SKIP):
            return None
        domain = _domain(request.url)
        d = self.domains.setdefault(domain, _Domain())
        if d.idle_call is not None and d.idle_call.active():
            d.idle_call.cancel()
        d.inflight += 1  # counted before waiting, so an idle release cannot race the wait
        try:
            lease = await self._lease_for(domain, d)
        except BaseException:
            d.inflight -= 1
            self._maybe_idle(domain, d)
            raise
        request.meta["proxy"] = lease.url
        request.meta[META_LEASE] = lease.lease_id
        return None

    def process_response(self, request: Any, response: Any, spider: Any) -> Any:
        lease_id = request.meta.get(META_LEASE)
        if lease_id is None:
            return response
        domain = _domain(request.url)
        d = self.domains.setdefault(domain, _Domain())
        d.inflight = max(0, d.inflight - 1)
        if response.status == 407:
            # The proxy refused the credentials the request carried: they
            # were set when Scrapy took the request, and it waited in the
            # downloader's queue past their expiry (a renewal's came since),
            # or the lease ended. Send it again with the domain's lease as it
            # is now.
            return self._retry(request, response, domain, d, STATS + "proxy_auth_retries")
        result = None
        if response.status == 429:
            result = RATE_LIMITED
        elif response.status in self.ban_codes or (self.ban_predicate is not None and self.ban_predicate(response, request)):
            result = BANNED
        if result is None:
            self._maybe_idle(domain, d)
            return response
        lease = self._drop(d, lease_id)
        if lease is not None:
            # Once per lease: the other requests that were in flight on it
            # only move.
            self.stats.inc_value(STATS + "reports/" + result)
            self._track(self._call(self.client.report, lease, result).addBoth(lambda _: self._release(lease)))
        logger.info("proxy %s answered %d for %s: reported %s, moving to another proxy",
                    request.meta.get("proxy"), response.status, domain, result)
        return self._retry(request, response, domain, d, STATS + "retries")

    def _retry(self, request: Any, response: Any, domain: str, d: "_Domain", stat: str) -> Any:
        """The request again, to lease anew (up to PROXY_OPERATOR_MAX_RETRIES times), else the response."""
        retries = request.meta.get(META_RETRIES, 0)
        if retries >= self.max_retries:
            self._maybe_idle(domain, d)
            return response
        self.stats.inc_value(stat)
        retry = request.replace(dont_filter=True)
        retry.meta.pop("proxy", None)
        retry.meta.pop(META_LEASE, None)
        retry.meta[META_RETRIES] = retries + 1
        return retry

    def process_exception(self, request: Any, exception: BaseException, spider: Any) -> None:
        if request.meta.get(META_LEASE) is None:
            return None
        domain = _domain(request.url)
        d = self.domains.setdefault(domain, _Domain())
        d.inflight = max(0, d.inflight - 1)
        self._maybe_idle(domain, d)
        return None

    # --- leases ---

    async def _lease_for(self, domain: str, d: _Domain) -> Lease:
        """A lease of the domain: one held (round-robin), else one acquired (shared by
        every request of the domain that arrives meanwhile)."""
        while True:
            if self._closing:
                raise IgnoreRequest("spider closing")
            left = d.cooling_until - time.monotonic()
            if left > 0:
                self.stats.inc_value(STATS + "site_cooling")
                raise IgnoreRequest(f"every proxy is cooling down for {domain}: its requests are dropped for another {left:.0f}s")
            if d.leases:
                if len(d.leases) < self.per_domain and d.acquiring is None:
                    # Grow towards LEASES_PER_DOMAIN without holding this request up.
                    d.acquiring, d.acquiring_waits = self._acquire(domain, d, wait=0), False
                lease = d.leases[d.next % len(d.leases)]
                d.next += 1
                return lease
            if d.acquiring is None:
                d.acquiring, d.acquiring_waits = self._acquire(domain, d, wait=self.wait), True
            waited = d.acquiring_waits
            # A Deferred under the default reactor, an asyncio Future under
            # AsyncioSelectorReactor (Scrapy's default since 2.13).
            if await maybe_deferred_to_future(_shared(d.acquiring)) is None and waited and d.cooling_until <= time.monotonic():
                self.stats.inc_value(STATS + "gave_up")
                raise IgnoreRequest(f"no proxy for {domain} after {self.attempts} waits of {self.wait}s")
            # Got one (now in d.leases), or a growth try without a wait found
            # none: look again.

    def _acquire(self, domain: str, d: _Domain, wait: int) -> defer.Deferred:
        attempts = self.attempts if wait > 0 else 1

        def one() -> Optional[Lease]:
            began = time.monotonic()
            try:
                return attempt()
            finally:
                self.stats.max_value(STATS + "lease_wait_seconds_max", round(time.monotonic() - began, 3))

        def attempt() -> Any:
            # A try without a wait first: its refusal says whether waiting
            # can help (the fleet is busy) or not (the site cools everywhere).
            # Then waits of at most `recheck` seconds, `attempts` × `wait` in
            # all, each refusal checked again: proxies may start cooling for
            # the site while it waits.
            budget = wait * attempts
            w = 0
            while True:
                if self._closing:
                    return None
                try:
                    return self.client.lease(self.selector, selectors=self.selectors, target=domain,
                                             ttl_seconds=self.ttl, wait_seconds=w, priority=self.priority,
                                             flow=self.flow)
                except NoMatch as e:
                    if site_cooling(e):
                        return _COOLING
                    if e.site_policy:
                        # The site's budget for the whole fleet is in use:
                        # waiting is right (the operator paces the site).
                        logger.debug("SitePolicy %s holds %s: waiting for its budget", e.site_policy, domain)
                        self.stats.inc_value(STATS + "site_budget")
                    if w > 0:
                        self.stats.inc_value(STATS + "no_match")
                budget -= w
                if budget <= 0:
                    return None
                w = min(wait, self.recheck, budget)

        result = deferToThreadPool(_reactor(), self._wait_pool, one)

        def done(lease: Any) -> Any:
            d.acquiring = None
            if lease is _COOLING:
                if self.cooling_backoff > 0:
                    d.cooling_until = time.monotonic() + self.cooling_backoff
                logger.warning("every proxy is cooling down for %s: backing off the site for %ss", domain, self.cooling_backoff)
                return None
            if isinstance(lease, Lease):
                if self._closing:
                    self._track(self._release(lease))
                    return None
                d.leases.append(lease)
                self.stats.inc_value(STATS + "leases_acquired")
                if lease.tier > 0:
                    self.stats.inc_value(STATS + "leases_climbed")
                logger.debug("leased %s for %s (tier %d)", lease.url, domain, lease.tier)
                return lease
            return None

        def failed(f: Any) -> None:
            d.acquiring = None
            self.stats.inc_value(STATS + "errors")
            logger.warning("leasing a proxy for %s failed: %s", domain, f.getErrorMessage())
            return None

        result.addCallbacks(done, failed)
        self._track(result)
        return result

    def _drop(self, d: _Domain, lease_id: str) -> Optional[Lease]:
        for i, lease in enumerate(d.leases):
            if lease.lease_id == lease_id:
                return d.leases.pop(i)
        return None

    def _maybe_idle(self, domain: str, d: _Domain) -> None:
        if d.inflight > 0 or not d.leases or self._closing:
            return
        if d.idle_call is not None and d.idle_call.active():
            d.idle_call.cancel()
        d.idle_call = _reactor().callLater(self.idle_release, self._release_idle, domain)

    def _release_idle(self, domain: str) -> None:
        d = self.domains.get(domain)
        if d is None or d.inflight > 0:
            return
        leases, d.leases = d.leases, []
        for lease in leases:
            self._track(self._release(lease))

    def _release(self, lease: Lease) -> defer.Deferred:
        def counted(r: Any) -> Any:
            self.stats.inc_value(STATS + "leases_released")
            return r

        return self._call(self.client.release, lease).addCallback(counted)

    def _renew_due(self) -> None:
        for d in self.domains.values():
            for lease in list(d.leases):
                if lease.seconds_left() < self.ttl / 3:
                    self._track(self._renew(d, lease))

    def _renew(self, d: _Domain, lease: Lease) -> defer.Deferred:
        def renewed(new: Lease) -> None:
            self.stats.inc_value(STATS + "leases_renewed")
            if new.proxy_draining:
                # Its ProxyPool removes the proxy: no new request goes there;
                # the ones in flight already passed the proxy's check. The
                # domain's next request leases another proxy.
                if self._drop(d, lease.lease_id) is not None:
                    self.stats.inc_value(STATS + "leases_left_draining")
                    self._track(self._release(new))
                return
            for i, held in enumerate(d.leases):
                if held.lease_id == lease.lease_id:
                    # The renewal's URL carries the new proxy credentials.
                    d.leases[i] = new

        def failed(f: Any) -> None:
            if f.check(LeaseEnded, UnknownLease):
                self._drop(d, lease.lease_id)  # ended: the next request leases again

        return deferToThreadPool(_reactor(), self._pool, self.client.renew, lease).addCallbacks(renewed, failed)

    def _call(self, fn: Callable[..., Any], *args: Any) -> defer.Deferred:
        def failed(f: Any) -> None:
            if not f.check(APIError):
                self.stats.inc_value(STATS + "errors")
            logger.warning("%s failed: %s", getattr(fn, "__name__", "call"), f.getErrorMessage())

        return deferToThreadPool(_reactor(), self._pool, fn, *args).addErrback(failed)

    def _track(self, d: defer.Deferred) -> None:
        self._pending.add(d)
        d.addBoth(lambda r: (self._pending.discard(d), r)[1])


def _domain(url: str) -> str:
    return (urlparse(url).hostname or "").lower()


def _reactor() -> Any:
    """The running reactor. Imported when used, not with this module: importing
    twisted.internet.reactor installs the default reactor, and Scrapy must be
    free to install the one TWISTED_REACTOR names."""
    from twisted.internet import reactor
    return reactor


def _shared(d: defer.Deferred) -> defer.Deferred:
    """A Deferred firing with d's result without taking it from d's other waiters."""
    out: defer.Deferred = defer.Deferred()

    def pass_on(r: Any) -> Any:
        out.callback(r)
        return r

    d.addBoth(pass_on)
    return out
