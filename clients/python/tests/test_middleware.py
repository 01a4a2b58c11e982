"""The Scrapy middleware in real Scrapy crawls against a fake API and fake proxies.

Each crawl runs e2e_crawl.py in a process of its own (a process installs one
Twisted reactor), once under Twisted's default reactor and once under
``AsyncioSelectorReactor`` (Scrapy's default since 2.13). The fake API is a
stateful HTTP server speaking the API's wire format (leases, renewals,
reports, releases, error bodies); the fake proxies are HTTP servers that
answer the absolute-URI requests Scrapy sends a forward proxy, recording
which lease's credentials each carried. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlparse

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_ROOT = os.path.dirname(HERE)

REACTORS = {
    "default": None,
    "asyncio": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
}


def _serve(handler: type, port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class FakeProxy:
    """A forward proxy that answers every request itself: ``status(proxy, url)`` decides the
    status (200 by default). It records (url, lease ID of the credentials) per request and
    answers 407 to a request without credentials."""

    def __init__(self, name: str, status: Callable[[str, str], int]) -> None:
        self.name = name
        self.seen: List[Tuple[str, Optional[str]]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                user = None
                auth = self.headers.get("Proxy-Authorization", "")
                if auth.startswith("Basic "):
                    user = base64.b64decode(auth[6:]).decode().split(":", 1)[0]
                proxy.seen.append((self.path, user))
                code = 407 if user is None else status(proxy.name, self.path)
                body = f"{proxy.name} {code}".encode()
                self.send_response(code)
                if code == 407:
                    self.send_header("Proxy-Authenticate", 'Basic realm="proxy-operator"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = _serve(Handler)
        self.port = self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeAPI:
    """The HTTP API's lease calls over a fleet of FakeProxies. As the real API: leases are
    exclusive (one live lease per proxy, until released), a lease gets the first free proxy not
    cooling down for its target, and a request with ``waitSeconds`` waits that long for one.
    ``script`` holds error answers to give first, per route (``"lease"``, ``"renew"``);
    ``draining`` makes renewals say the proxy is draining; ``tier`` is the ladder's tier
    every lease says it was granted on."""

    def __init__(self, proxies: List[FakeProxy], port: int = 0, start: bool = True) -> None:
        self.proxies = proxies
        self.lock = threading.Condition()
        self.leases: Dict[str, Dict[str, Any]] = {}
        self.calls: List[Tuple[str, str, Any]] = []
        self.cooling: set = set()
        self.script: Dict[str, List[Tuple[int, Dict[str, Any]]]] = {}
        self.draining: set = set()
        self.tier = 0
        self.next_id = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Optional[Dict[str, Any]]) -> None:
                raw = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _route(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                if self.headers.get("Authorization") != "Bearer tok":
                    self._answer(401, {"error": "unauthorized", "message": "no token"})
                    return
                status, answer = api.handle(self.command, self.path, body)
                self._answer(status, answer)

            do_GET = do_POST = do_DELETE = _route

        self._handler = Handler
        self.port = port
        self.server: Optional[ThreadingHTTPServer] = None
        if start:
            self.start()

    def start(self) -> None:
        self.server = _serve(self._handler, self.port)
        self.port = self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def scripted(self, route: str) -> Optional[Tuple[int, Dict[str, Any]]]:
        queue = self.script.get(route)
        return queue.pop(0) if queue else None

    def lease_body(self, lease_id: str) -> Dict[str, Any]:
        lease = self.leases[lease_id]
        p = lease["proxy"]
        return {"leaseID": lease_id, "ttlSeconds": lease["ttl"], "expiresAt": "2030-01-01T00:00:00Z",
                "proxyDraining": p.name in self.draining, "tier": self.tier,
                "proxy": {"name": p.name, "namespace": "default", "host": "127.0.0.1", "port": p.port,
                          "url": f"http://{lease_id}:secret@127.0.0.1:{p.port}", "attributes": {}}}

    def handle(self, method: str, path: str, body: Any) -> Tuple[int, Optional[Dict[str, Any]]]:
        with self.lock:
            self.calls.append((method, path, body))
            parts = path.strip("/").split("/")
            if method == "POST" and path == "/v1/leases":
                scripted = self.scripted("lease")
                if scripted:
                    return scripted
                target = body.get("target", "")
                deadline = time.monotonic() + float(body.get("waitSeconds") or 0)
                while True:
                    held = {lease["proxy"].name for lease in self.leases.values() if lease["live"]}
                    cooling = [p for p in self.proxies if (p.name, target) in self.cooling]
                    free = [p for p in self.proxies if p not in cooling and p.name not in self.draining and p.name not in held]
                    left = deadline - time.monotonic()
                    if free or left <= 0:
                        break
                    self.lock.wait(left)
                if not free:
                    return 409, {"error": "no_match", "message": "no proxy", "considered": len(self.proxies),
                                 "free": 0, "atCapacity": len(held), "inCooldown": len(cooling), "unhealthy": 0}
                self.next_id += 1
                lease_id = f"lease{self.next_id}"
                self.leases[lease_id] = {"proxy": free[0], "ttl": int(body.get("ttlSeconds") or 300), "target": target,
                                         "live": True}
                return 201, self.lease_body(lease_id)
            if len(parts) >= 3 and parts[:2] == ["v1", "leases"]:
                lease_id = parts[2]
                if lease_id not in self.leases:
                    return 404, {"error": "unknown_lease", "message": "no such lease"}
                if method == "DELETE":
                    self.leases[lease_id]["live"] = False
                    self.lock.notify_all()
                    return 204, None
                if method == "POST" and parts[3:] == ["renew"]:
                    scripted = self.scripted("renew")
                    return scripted if scripted else (200, self.lease_body(lease_id))
                if method == "POST" and parts[3:] == ["report"]:
                    lease = self.leases[lease_id]
                    if body.get("result") in ("rate_limited", "banned"):
                        self.cooling.add((lease["proxy"].name, lease["target"]))
                    return 204, None
            return 404, {"error": "not_found", "message": "no route"}

    def count(self, method: str, suffix: str = "") -> int:
        with self.lock:
            return sum(1 for m, p, _ in self.calls if m == method and p.endswith(suffix))

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def crawl(tmp_path: Any, api_url: str, urls: List[str], reactor: Optional[str], gap: Optional[float] = None,
          **settings: Any) -> Dict[str, Any]:
    """Runs e2e_crawl.py with the middleware pointed at api_url; returns its stats and pages."""
    s: Dict[str, Any] = {"PROXY_OPERATOR_URL": api_url, "PROXY_OPERATOR_TTL": 60, "PROXY_OPERATOR_WAIT": 1,
                         "PROXY_OPERATOR_IDLE_RELEASE": 30, "LOG_LEVEL": "WARNING"}
    if reactor:
        s["TWISTED_REACTOR"] = reactor
    s.update(settings)
    cfg, out = tmp_path / "crawl.json", tmp_path / "result.json"
    cfg.write_text(json.dumps({"urls": urls, "settings": s, "gap": gap}))
    env = dict(os.environ, PROXY_OPERATOR_TOKEN="tok", PYTHONPATH=CLIENT_ROOT)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "e2e_crawl.py"), str(cfg), str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    result["log"] = proc.stderr
    return result


@pytest.fixture(params=sorted(REACTORS))
def reactor(request: Any) -> Optional[str]:
    return REACTORS[request.param]


@pytest.fixture
def fleet(request: Any) -> Callable[..., Tuple[FakeAPI, List[FakeProxy]]]:
    made: List[Any] = []

    def make(n: int = 2, status: Callable[[str, str], int] = lambda proxy, url: 200, **kw: Any) -> Tuple[FakeAPI, List[FakeProxy]]:
        proxies = [FakeProxy(f"proxy-{chr(ord('a') + i)}", status) for i in range(n)]
        api = FakeAPI(proxies, **kw)
        made.extend(proxies + [api])
        return api, proxies

    yield make
    for m in made:
        m.close()


def stat(result: Dict[str, Any], name: str) -> int:
    return int(result["stats"].get("proxy_operator/" + name, 0))


def test_requests_go_through_leased_proxies_and_leases_are_released(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    api, proxies = fleet()
    urls = ["http://site-a.test/1", "http://site-b.test/1", "http://site-a.test/2"]
    result = crawl(tmp_path, api.url, urls, reactor)

    if reactor:
        assert result["reactor"] == "AsyncioSelectorReactor"
    else:
        assert result["reactor"] != "AsyncioSelectorReactor"
    assert sorted(p["url"] for p in result["seen"]) == sorted(urls)
    assert all(p["status"] == 200 for p in result["seen"])
    # Every request reached a proxy with the credentials of a lease for its site.
    seen = [(url, user) for p in proxies for url, user in p.seen]
    assert sorted(url for url, _ in seen) == sorted(urls)
    for url, user in seen:
        assert user in api.leases, (url, user)
        assert api.leases[user]["target"] == urlparse(url).hostname
    # One lease per site, and each released before the spider closed.
    assert stat(result, "leases_acquired") == 2
    assert api.count("POST", "/v1/leases") == 2
    assert api.count("DELETE") == 2 == stat(result, "leases_released")
    assert stat(result, "gave_up") == 0 and stat(result, "errors") == 0


def test_a_leader_handover_drops_no_request(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    api, _ = fleet()
    not_leader = (503, {"error": "not_leader", "message": "this replica is the standby", "leader": "proxy-operator-1"})
    api.script["lease"] = [not_leader] * 3
    result = crawl(tmp_path, api.url, ["http://site-a.test/1"], reactor)

    assert [p["status"] for p in result["seen"]] == [200]
    assert api.count("POST", "/v1/leases") == 4  # three refusals, then the grant
    assert stat(result, "gave_up") == 0 and stat(result, "errors") == 0


def test_a_site_budget_in_use_is_waited_for_and_counted(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    api, _ = fleet()
    budget = (409, {"error": "no_match", "message": 'SitePolicy "a": the site\'s 1 leases are in use', "considered": 2,
                    "atCapacity": 0, "inCooldown": 0, "unhealthy": 0, "free": 2, "queuedAhead": 0, "sitePolicy": "a"})
    api.script["lease"] = [budget] * 2
    result = crawl(tmp_path, api.url, ["http://site-a.test/1"], reactor)

    assert [p["status"] for p in result["seen"]] == [200]
    assert stat(result, "site_budget") == 2 and stat(result, "site_cooling") == 0 and stat(result, "gave_up") == 0


def test_a_ladder_is_sent_and_climbed_leases_counted(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    api, _ = fleet()
    api.tier = 1  # the API grants on the ladder's second tier
    ladder = [{"tier": "cheap"}, {"tier": "premium"}]
    result = crawl(tmp_path, api.url, ["http://site-a.test/1", "http://site-b.test/1"], reactor,
                   PROXY_OPERATOR_SELECTORS=ladder)

    assert sorted(p["status"] for p in result["seen"]) == [200, 200]
    bodies = [b for m, p, b in api.calls if m == "POST" and p == "/v1/leases"]
    assert len(bodies) == 2 and all(b["selectors"] == ladder and "selector" not in b for b in bodies)
    assert stat(result, "leases_climbed") == 2 == stat(result, "leases_acquired")


def test_an_api_that_is_not_up_yet_is_waited_for(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    # The API's port refuses connections for its first two seconds (a restart).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api, _ = fleet(port=port, start=False)
    threading.Timer(2.0, api.start).start()
    result = crawl(tmp_path, api.url, ["http://site-a.test/1"], reactor)

    assert [p["status"] for p in result["seen"]] == [200]
    assert stat(result, "gave_up") == 0 and stat(result, "errors") == 0


def test_a_handover_longer_than_retry_for_is_an_error_not_a_hang(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    # Negative control of the two tests above: with retries cut to one second,
    # the same refusals lose the request.
    api, _ = fleet()
    api.script["lease"] = [(503, {"error": "not_leader", "message": "standby"})] * 50
    result = crawl(tmp_path, api.url, ["http://site-a.test/1"], reactor, PROXY_OPERATOR_RETRY_FOR=1,
                   PROXY_OPERATOR_LEASE_ATTEMPTS=1)

    assert result["seen"] == []
    assert stat(result, "errors") >= 1


def test_rate_limited_is_reported_and_the_request_moves_to_another_proxy(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    api, proxies = fleet(status=lambda proxy, url: 429 if proxy == "proxy-a" else 200)
    result = crawl(tmp_path, api.url, ["http://site-a.test/1"], reactor)

    assert [(p["status"], urlparse(p["proxy"]).port) for p in result["seen"]] == [(200, proxies[1].port)]
    assert ("proxy-a", "site-a.test") in api.cooling
    reports = [b for m, p, b in api.calls if p.endswith("/report")]
    assert reports == [{"result": "rate_limited"}]
    assert stat(result, "reports/rate_limited") == 1 and stat(result, "retries") == 1
    assert api.count("DELETE") == 2  # the reported lease, then the second at close


def test_a_draining_proxy_gets_no_new_request(tmp_path: Any, reactor: Optional[str], fleet: Any) -> None:
    # TTL 6: renewals are checked every second and due at 2 s left. The
    # first page is fetched, the proxy starts draining, a renewal says so
    # (within 5 s), and the second page (requested 7 s later) goes to the
    # other proxy.
    api, proxies = fleet()
    started = time.monotonic()

    def drain_after_first() -> None:
        while not proxies[0].seen and time.monotonic() - started < 60:
            time.sleep(0.05)
        api.draining.add("proxy-a")

    threading.Thread(target=drain_after_first, daemon=True).start()
    result = crawl(tmp_path, api.url, ["http://site-a.test/1", "http://site-a.test/2"], reactor,
                   gap=7, PROXY_OPERATOR_TTL=6)

    assert [url for url, _ in proxies[0].seen] == ["http://site-a.test/1"]
    assert [url for url, _ in proxies[1].seen] == ["http://site-a.test/2"]
    assert stat(result, "leases_left_draining") == 1
    assert stat(result, "gave_up") == 0
