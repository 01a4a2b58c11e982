"""Unit tests of the client against a local HTTP server answering as the API does."""

import json
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import proxy_operator as po

LEASE = {"leaseID": "abc123", "proxy": {"name": "proxy-a", "namespace": "default", "url": "http://127.0.0.2:3128",
                                        "host": "127.0.0.2", "port": 3128, "attributes": {"tier": "standard"},
                                        "latencyMillis": 3},
         "expiresAt": "2026-01-01T12:05:00Z", "ttlSeconds": 300}


class FakeAPI:
    """A server whose answers the test scripts: a queue of (status, body, headers) per
    (method, path); every request is recorded."""

    def __init__(self, tls=None):
        self.answers = {}
        self.requests = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                api.requests.append((self.command, self.path, body, self.headers.get("Authorization")))
                queue = api.answers.get((self.command, self.path.split("?")[0]), [])
                status, payload, headers = queue.pop(0) if queue else (404, {"error": "not_found", "message": "no route"}, {})
                raw = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, method, path, status, body=None, headers=None):
        self.answers.setdefault((method, path), []).append((status, body, headers or {}))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def wire_codes():
    """The error codes of the Go server, read from pkg/discovery/wire."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "pkg", "discovery", "wire", "wire.go")
    with open(path) as f:
        return set(re.findall(r'^\s*Code[A-Za-z]+\s*=\s*"([a-z_]+)"', f.read(), re.M))


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.api = FakeAPI()
        self.addCleanup(self.api.close)
        self.sleeps = []
        self.client = po.Client(self.api.url, "tok", sleep=self.sleeps.append)

    def test_lease_sends_the_request_and_parses_the_answer(self):
        self.api.answer("POST", "/v1/leases", 201, LEASE)
        lease = self.client.lease({"tier": "standard"}, target="example.com", ttl_seconds=60, wait_seconds=5,
                                  priority=2, flow="batch")
        method, path, body, auth = self.api.requests[0]
        self.assertEqual(("POST", "/v1/leases", "Bearer tok"), (method, path, auth))
        self.assertEqual({"selector": {"tier": "standard"}, "target": "example.com", "ttlSeconds": 60,
                          "waitSeconds": 5, "priority": 2, "flow": "batch"}, body)
        self.assertEqual(("abc123", "http://127.0.0.2:3128", 3128, {"tier": "standard"}, 300, "example.com"),
                         (lease.lease_id, lease.url, lease.proxy.port, lease.proxy.attributes, lease.ttl_seconds,
                          lease.target))
        self.assertGreater(lease.seconds_left(), 299)

    def test_lease_sends_a_ladder_and_parses_the_tier(self):
        self.api.answer("POST", "/v1/leases", 201, dict(LEASE, tier=1))
        ladder = [{"tier": "cheap"}, {"tier": "premium"}]
        lease = self.client.lease(selectors=ladder, target="example.com")
        _, _, body, _ = self.api.requests[0]
        self.assertEqual({"selectors": ladder, "target": "example.com"}, body)
        self.assertEqual(1, lease.tier)
        with self.assertRaises(ValueError):
            self.client.lease({"tier": "cheap"}, selectors=ladder)
        self.assertEqual(1, len(self.api.requests))

    def test_a_lease_without_a_tier_is_on_the_first(self):
        self.api.answer("POST", "/v1/leases", 201, LEASE)
        self.assertEqual(0, self.client.lease().tier)

    def test_renew_report_release_and_list(self):
        self.api.answer("POST", "/v1/leases/abc123/renew", 200, dict(LEASE, ttlSeconds=600))
        self.api.answer("POST", "/v1/leases/abc123/report", 204)
        self.api.answer("DELETE", "/v1/leases/abc123", 204)
        self.api.answer("GET", "/v1/proxies", 200, {"proxies": [dict(LEASE["proxy"], healthy=True, activeLeases=1)],
                                                    "count": 1})
        lease = po.Lease.from_json(LEASE, target="example.com")
        self.assertEqual(600, self.client.renew(lease, ttl_seconds=600).ttl_seconds)
        self.client.report(lease, po.RATE_LIMITED)
        self.client.release(lease)
        proxies = self.client.list_proxies({"tier": "standard"}, healthy=True, namespace="default")
        self.assertEqual([("proxy-a", True, 1)], [(p.name, p.healthy, p.active_leases) for p in proxies])
        paths = [(m, p, b) for m, p, b, _ in self.api.requests]
        self.assertEqual([
            ("POST", "/v1/leases/abc123/renew", {"ttlSeconds": 600}),
            ("POST", "/v1/leases/abc123/report", {"result": "rate_limited"}),
            ("DELETE", "/v1/leases/abc123", None),
            ("GET", "/v1/proxies?attr.tier=standard&healthy=true&namespace=default", None),
        ], paths)

    def test_get_shows_the_lease_as_it_is_now(self):
        moved = dict(LEASE, proxy=dict(LEASE["proxy"], url="http://127.0.0.9:3128", host="127.0.0.9"), proxyHealthy=False)
        self.api.answer("GET", "/v1/leases/abc123", 200, moved)
        self.api.answer("GET", "/v1/leases/abc123", 410, {"error": "lease_ended",
                                                          "message": "lease \"abc123\": lease ended: its proxy was deleted; acquire a new one"})
        lease = po.Lease.from_json(dict(LEASE, proxyHealthy=True), target="example.com")
        self.assertTrue(lease.proxy_healthy)
        self.assertFalse(lease.proxy_draining)
        self.assertTrue(po.Lease.from_json(dict(LEASE, proxyDraining=True)).proxy_draining)
        now = self.client.get(lease)
        self.assertEqual(("http://127.0.0.9:3128", False, "example.com"), (now.url, now.proxy_healthy, now.target))
        with self.assertRaises(po.LeaseEnded) as cm:
            self.client.get("abc123")
        self.assertIn("proxy was deleted", cm.exception.message)
        self.assertEqual([("GET", "/v1/leases/abc123")] * 2, [(m, p) for m, p, _, _ in self.api.requests])

    def test_every_error_code_has_its_exception(self):
        client = po.Client(self.api.url, "tok", retry_for=0, sleep=self.sleeps.append)
        cases = [
            (400, "invalid_json", po.InvalidRequest),
            (400, "invalid_request", po.InvalidRequest),
            (400, "ttl_too_long", po.TTLTooLong),
            (400, "invalid_result", po.InvalidResult),
            (400, "invalid_query", po.InvalidRequest),
            (401, "unauthorized", po.Unauthorized),
            (403, "forbidden", po.Forbidden),
            (403, "cooldown_limit", po.CooldownLimit),
            (404, "unknown_lease", po.UnknownLease),
            (404, "not_found", po.NotFound),
            (405, "method_not_allowed", po.MethodNotAllowed),
            (409, "no_match", po.NoMatch),
            (409, "no_room", po.NoRoom),
            (410, "lease_ended", po.LeaseEnded),
            (413, "body_too_large", po.BodyTooLarge),
            (429, "queue_full", po.QueueFull),
            (503, "unavailable", po.Unavailable),
            (503, "not_leader", po.NotLeader),
            (500, "internal", po.ServerError),
        ]
        # Every code the server has (pkg/discovery/wire) is here and in the client.
        self.assertEqual(wire_codes(), {code for _, code, _ in cases})
        self.assertEqual(wire_codes(), set(po.CODES))
        for status, code, cls in cases:
            with self.subTest(code=code):
                self.api.answer("POST", "/v1/leases/x/renew", status, {"error": code, "message": "because " + code})
                with self.assertRaises(cls) as ctx:
                    client.renew("x")
                e = ctx.exception
                self.assertEqual((status, code, "because " + code), (e.status, e.code, e.message))
                self.assertIsInstance(e, po.APIError)
                # Negative control: no other specific class claims it.
                for _, _, other in cases:
                    if other is not cls and not issubclass(cls, other):
                        self.assertNotIsInstance(e, other)

    def test_not_leader_is_retried_through_a_handover(self):
        for _ in range(3):
            self.api.answer("POST", "/v1/leases", 503, {"error": "not_leader", "message": "standby",
                                                        "leader": "operator-0_abc"}, {"Retry-After": "1"})
        self.api.answer("POST", "/v1/leases", 201, LEASE)
        self.assertEqual("abc123", self.client.lease().lease_id)
        self.assertEqual([0.5, 1.0, 2.0], self.sleeps)
        self.assertEqual(4, len(self.api.requests))

    def test_not_leader_past_retry_for_is_raised(self):
        client = po.Client(self.api.url, "tok", retry_for=2, sleep=self.sleeps.append)
        for _ in range(5):
            self.api.answer("GET", "/v1/leases/abc123", 503, {"error": "not_leader", "message": "standby",
                                                              "leader": "operator-0_abc"})
        with self.assertRaises(po.NotLeader) as ctx:
            client.get("abc123")
        self.assertEqual("operator-0_abc", ctx.exception.leader)
        self.assertIsInstance(ctx.exception, po.Unavailable)
        # 0.5 + 1.0 slept; 2.0 more would pass retry_for.
        self.assertEqual([0.5, 1.0], self.sleeps)

    def test_a_refused_connection_is_an_api_error_and_retried(self):
        closed = FakeAPI()
        url = closed.url
        closed.close()  # nothing listens there now
        client = po.Client(url, "tok", retry_for=1, sleep=self.sleeps.append)
        for call in (lambda: client.get("abc123"), lambda: client.lease()):
            self.sleeps.clear()
            with self.assertRaises(po.TransportError) as ctx:
                call()
            e = ctx.exception
            self.assertIsInstance(e, po.APIError)
            self.assertEqual((0, "transport", True), (e.status, e.code, e.refused))
            self.assertEqual([0.5], self.sleeps)  # retried: a refused request reached no server

    def test_a_lease_that_may_have_been_granted_is_not_retried(self):
        # The server takes the request and drops the connection without an answer.
        import socket
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        self.addCleanup(srv.close)
        stop = threading.Event()

        def drop():
            srv.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                conn.recv(65536)
                conn.close()
        t = threading.Thread(target=drop, daemon=True)
        t.start()
        self.addCleanup(stop.set)
        client = po.Client(f"http://127.0.0.1:{srv.getsockname()[1]}", "tok", retry_for=10, sleep=self.sleeps.append)
        with self.assertRaises(po.TransportError) as ctx:
            client.lease()
        self.assertFalse(ctx.exception.refused)
        self.assertEqual([], self.sleeps)  # not retried: it may have been granted
        # Negative control: the same failure on a read is retried.
        with self.assertRaises(po.TransportError):
            client.get("abc123")
        self.assertGreater(len(self.sleeps), 0)

    def test_no_match_carries_the_counts(self):
        self.api.answer("POST", "/v1/leases", 409, {"error": "no_match", "message": "no proxy", "considered": 3,
                                                    "atCapacity": 1, "inCooldown": 1, "unhealthy": 1})
        with self.assertRaises(po.NoMatch) as ctx:
            self.client.lease()
        e = ctx.exception
        self.assertEqual((3, 1, 1, 1), (e.considered, e.at_capacity, e.in_cooldown, e.unhealthy))
        self.assertEqual((0, 0), (e.free, e.queued_ahead))

    def test_no_match_says_what_waits_ahead(self):
        self.api.answer("POST", "/v1/leases", 409, {"error": "no_match", "message": "2 earlier requests wait",
                                                    "considered": 5, "atCapacity": 0, "inCooldown": 0, "unhealthy": 0,
                                                    "free": 5, "queuedAhead": 2})
        with self.assertRaises(po.NoMatch) as ctx:
            self.client.lease(target="a.test")
        e = ctx.exception
        self.assertEqual((5, 2), (e.free, e.queued_ahead))
        self.assertEqual(e.considered, e.at_capacity + e.in_cooldown + e.unhealthy + e.free)

    def test_no_match_names_the_site_policy(self):
        self.api.answer("POST", "/v1/leases", 409, {"error": "no_match", "message": 'SitePolicy "shop": the site\'s 4 leases are in use',
                                                    "considered": 6, "atCapacity": 0, "inCooldown": 0, "unhealthy": 0,
                                                    "free": 6, "queuedAhead": 0, "sitePolicy": "shop"})
        with self.assertRaises(po.NoMatch) as ctx:
            self.client.lease(target="shop.test")
        self.assertEqual("shop", ctx.exception.site_policy)
        self.assertIn("SitePolicy", str(ctx.exception))

    def test_no_match_names_the_ladder_tier(self):
        self.api.answer("POST", "/v1/leases", 409, {"error": "no_match", "message": "no proxy of tier 1", "considered": 2,
                                                    "atCapacity": 2, "inCooldown": 0, "unhealthy": 0, "free": 0, "tier": 1})
        with self.assertRaises(po.NoMatch) as ctx:
            self.client.lease(selectors=[{}, {}], target="shop.test")
        self.assertEqual(1, ctx.exception.tier)

    def test_no_match_without_a_site_policy_names_none(self):
        self.api.answer("POST", "/v1/leases", 409, {"error": "no_match", "message": "no proxy", "considered": 1, "atCapacity": 1})
        with self.assertRaises(po.NoMatch) as ctx:
            self.client.lease()
        self.assertEqual("", ctx.exception.site_policy)

    def test_ttl_too_long_carries_the_maximum(self):
        self.api.answer("POST", "/v1/leases", 400, {"error": "ttl_too_long", "message": "too long", "maxTtlSeconds": 3600})
        with self.assertRaises(po.TTLTooLong) as ctx:
            self.client.lease(ttl_seconds=7200)
        self.assertEqual(3600, ctx.exception.max_ttl_seconds)

    def test_queue_full_is_retried_after_retry_after(self):
        self.api.answer("POST", "/v1/leases", 429, {"error": "queue_full", "message": "full"}, {"Retry-After": "2"})
        self.api.answer("POST", "/v1/leases", 429, {"error": "queue_full", "message": "full"}, {"Retry-After": "3"})
        self.api.answer("POST", "/v1/leases", 201, LEASE)
        self.assertEqual("abc123", self.client.lease(wait_seconds=10).lease_id)
        self.assertEqual([2.0, 3.0], self.sleeps)

    def test_queue_full_gives_up_after_its_retries(self):
        client = po.Client(self.api.url, "tok", queue_full_retries=1, sleep=self.sleeps.append)
        for _ in range(2):
            self.api.answer("POST", "/v1/leases", 429, {"error": "queue_full", "message": "full"}, {"Retry-After": "7"})
        with self.assertRaises(po.QueueFull) as ctx:
            client.lease(wait_seconds=10)
        self.assertEqual((7.0, [7.0]), (ctx.exception.retry_after, self.sleeps))

    def test_error_without_a_json_body(self):
        self.api.answer("GET", "/v1/proxies", 502, None)
        with self.assertRaises(po.ServerError) as ctx:
            self.client.list_proxies()
        self.assertEqual((502, "http_502"), (ctx.exception.status, ctx.exception.code))

    def test_token_from_the_environment(self):
        os.environ[po.TOKEN_ENV] = "from-env"
        self.addCleanup(os.environ.pop, po.TOKEN_ENV)
        self.api.answer("GET", "/v1/proxies", 200, {"proxies": [], "count": 0})
        self.assertEqual([], po.Client(self.api.url).list_proxies())
        self.assertEqual("Bearer from-env", self.api.requests[-1][3])

    def test_context_manager_releases_even_on_error(self):
        self.api.answer("POST", "/v1/leases", 201, LEASE)
        self.api.answer("DELETE", "/v1/leases/abc123", 204)
        with self.assertRaises(RuntimeError):
            with self.client.leased(selector={"tier": "standard"}) as lease:
                self.assertEqual("abc123", lease.lease_id)
                raise RuntimeError("crawl failed")
        self.assertEqual(("DELETE", "/v1/leases/abc123"), self.api.requests[-1][:2])


@unittest.skipIf(shutil.which("openssl") is None, "needs openssl to make a certificate")
class TLSTest(unittest.TestCase):
    def setUp(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        self.cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", self.cert],
                       check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, key)
        self.api = FakeAPI(tls=ctx)
        self.addCleanup(self.api.close)

    def test_verifies_with_the_ca_file(self):
        self.api.answer("GET", "/v1/proxies", 200, {"proxies": [], "count": 0})
        self.assertEqual([], po.Client(self.api.url, "t", ca_file=self.cert).list_proxies())

    def test_refuses_an_unknown_certificate(self):
        # Negative control: without the CA the same server is refused.
        with self.assertRaises(Exception) as ctx:
            po.Client(self.api.url, "t").list_proxies()
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
