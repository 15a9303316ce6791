#!/usr/bin/env python3
"""The outside review's probes (issue 13), re-run against a herald binary.

    python3 scripts/red_team.py target/release/herald [PROBE ...]

PROBE is any of: bounce, logins, slow-headers, nul, tls (default: all).
`nul` needs HERALD_TEST_POSTGRES_URL (it runs on PostgreSQL, where U+0000
was a 500); `tls` needs aiosmtpd and the openssl command line.

Every probe starts its own `herald serve` on 127.0.0.1 over a fresh
database in a temporary directory, is bounded in requests and time, kills
what it started, and prints one result line (and exits non-zero on a
failed expectation). Nothing leaves the machine.
"""

import concurrent.futures
import http.client
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILED = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`herald serve` in a temporary directory, killed on exit."""

    def __init__(self, binary, env=None, database_url=None):
        self.binary = os.path.abspath(binary)
        self.dir = tempfile.mkdtemp(prefix="herald-probe-")
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, HERALD_LOG="warn", **(env or {}))
        if database_url:
            self.env["HERALD_DATABASE_URL"] = database_url
        self.proc = None

    def cli(self, *args, stdin=None):
        out = subprocess.run(
            [self.binary, *args], cwd=self.dir, env=self.env, input=stdin, capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            raise RuntimeError(f"herald {' '.join(args)}: {out.stderr}")
        return out.stdout.strip()

    def __enter__(self):
        self.cli("migrate")
        self.log = open(os.path.join(self.dir, "serve.log"), "w")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}"],
            cwd=self.dir,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.healthy():
                return self
            time.sleep(0.1)
        raise RuntimeError("herald serve did not come up")

    def __exit__(self, *exc):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def healthy(self):
        try:
            with urllib.request.urlopen(self.base + "/healthz", timeout=5) as r:
                return r.status == 200
        except Exception:
            return False

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0


def request(method, url, body=None, headers=None, timeout=60, source=None):
    """(status, headers, body); HTTP errors are answers, not exceptions.
    `source` is the loopback address to send from (the server sees it as
    the client's address)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(
        u.hostname, u.port, timeout=timeout, source_address=(source, 0) if source else None
    )
    path = u.path + (("?" + u.query) if u.query else "")
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, r.headers, data


def result(name, ok, detail):
    print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def nested(levels):
    head = b"From: MAILER-DAEMON@example.com\r\nTo: a@example.com\r\nSubject: Undelivered Mail Returned to Sender\r\n"
    return head + b"Content-Type: message/rfc822\r\n\r\n" * levels + b"From: x@example.com\r\n\r\nbody\r\n"


def probe_bounce(binary):
    with Server(binary) as s:
        key = s.cli("keys", "create", "--name", "probe")
        body = nested(60_000)
        started = time.monotonic()
        status, _, answer = request(
            "POST",
            s.base + "/v1/bounces/mail",
            body,
            {"Authorization": f"Bearer {key}", "Content-Type": "message/rfc822"},
        )
        took = time.monotonic() - started
        alive = s.healthy() and s.proc.poll() is None
        detail = json.loads(answer).get("errors", [{}])[0].get("message", answer[:200])
        result(
            "bounce: 60,000-level message/rfc822 to /v1/bounces/mail",
            status == 422 and alive,
            f"{len(body):,} bytes -> {status} in {took:.2f}s ({detail!r}); /healthz afterwards: "
            f"{'200' if alive else 'NO ANSWER'}",
        )
    path = os.path.join(tempfile.mkdtemp(prefix="herald-probe-"), "deep-10m.eml")
    with open(path, "wb") as f:
        f.write(nested((10 * 1024 * 1024 - 200) // 32))
    started = time.monotonic()
    out = subprocess.run([binary, "bounce", "parse", path], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    crashed = out.returncode < 0 or out.returncode == 134 or "overflow" in out.stderr
    said = (out.stdout + out.stderr).strip().splitlines()
    result(
        "bounce: herald bounce parse on a 10 MB nested message",
        not crashed,
        f"{os.path.getsize(path):,} bytes, exit {out.returncode} in {took:.2f}s: {said[-1] if said else ''!r}",
    )


def login_once(base, email, password, source=None):
    status, headers, page = request("GET", base + "/ui/login", source=source)
    cookie = next(
        v.split(";")[0] for k, v in headers.items() if k.lower() == "set-cookie" and v.startswith("herald_login=")
    )
    csrf = re.search(rb'name="csrf" value="([^"]+)"', page).group(1).decode()
    form = urllib.parse.urlencode({"email": email, "password": password, "csrf": csrf, "next": ""})
    status, _, _ = request(
        "POST",
        base + "/ui/login",
        form,
        {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"},
        source=source,
    )
    return status


def probe_logins(binary):
    with Server(binary) as s:
        s.cli("operators", "add", "--email", "ops@example.com", "--password-stdin", stdin="the right password 123\n")
        rss = [s.rss_mib()]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                rss.append(s.rss_mib())
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        with concurrent.futures.ThreadPoolExecutor(60) as pool:
            statuses = list(pool.map(lambda i: login_once(s.base, "ops@example.com", f"guess {i}"), range(60)))
        db = sqlite3.connect(os.path.join(s.dir, "herald.db"))

        def checked():
            return db.execute(
                "SELECT COUNT(*) FROM engagement_login_attempts WHERE outcome IN ('wrong_password', 'unknown_email')"
            ).fetchone()[0]

        counts = {c: statuses.count(c) for c in sorted(set(statuses))}
        result(
            "logins: 60 concurrent wrong passwords for one email",
            checked() <= 5,
            f"{checked()} reached Argon2 (limit 5); answers {counts} (503: every checking slot busy, nothing checked)",
        )
        # Then one at a time until the address is locked out (bounded).
        more = []
        while len(more) < 20 and (not more or more[-1] != 429):
            more.append(login_once(s.base, "ops@example.com", f"sequential guess {len(more)}"))
        right = login_once(s.base, "ops@example.com", "the right password 123")
        result(
            "logins: then one at a time, and the right password from the guessing address",
            checked() <= 5 and right == 429,
            f"sequential answers {more}; {checked()} checked in all; the right password -> {right} (429: locked out)",
        )
        elsewhere = login_once(s.base, "ops@example.com", "the right password 123", "127.0.0.2")
        result(
            "logins: the operator from another address",
            elsewhere == 303,
            f"{elsewhere} (303: logged in; five wrong passwords elsewhere do not lock the operator out)",
        )
        # A 300-request burst from 60 loopback addresses and for 300
        # emails, so that neither the per-email nor the per-address limit
        # stops them before the password check: the checking slots
        # (ui.login_concurrency) are what bound the memory.
        with concurrent.futures.ThreadPoolExecutor(100) as pool:
            burst = list(
                pool.map(lambda i: login_once(s.base, f"u{i}@example.com", "x", f"127.0.1.{i % 60 + 1}"), range(300))
            )
        stop.set()
        sampler.join()
        db.close()
        counts = {c: burst.count(c) for c in sorted(set(burst))}
        result(
            "logins: RSS through a 300-request burst",
            max(rss) < 300,
            f"RSS {rss[0]:.1f} MiB before, max {max(rss):.1f} MiB, {rss[-1]:.1f} MiB after "
            f"({len(rss)} samples from /proc/PID/status); answers {counts}",
        )


def probe_slow_headers(binary, connections=2000, timeout_s=10):
    with Server(binary) as s:
        socks = []
        for _ in range(connections):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(c)
        opened = time.monotonic()
        closed, open_after = 0, 0
        deadline = opened + timeout_s + 30
        for c in socks:
            c.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                data = c.recv(1024)
                if data == b"" or data.startswith(b"HTTP/1.1 408"):
                    closed += 1
                else:
                    open_after += 1
            except socket.timeout:
                open_after += 1
            except ConnectionResetError:
                closed += 1
            c.close()
        took = time.monotonic() - opened
        fresh = s.healthy()
        result(
            f"slow headers: {connections} connections with incomplete headers",
            closed == connections and fresh,
            f"{closed} closed by the server within {took:.1f}s (http.header_read_timeout {timeout_s}s), "
            f"{open_after} still open; a fresh request afterwards: {'200' if fresh else 'no answer'}",
        )


def probe_nul(binary):
    admin = os.environ.get("HERALD_TEST_POSTGRES_URL")
    if not admin:
        result("nul", False, "HERALD_TEST_POSTGRES_URL is not set: did not run")
        return
    schema = f"herald_probe_{os.getpid()}"
    subprocess.run(["psql", "-q", admin, "-c", f"CREATE SCHEMA {schema}"], check=True)
    url = f"{admin}?options=-c%20search_path%3D{schema}"
    try:
        with Server(binary, database_url=url) as s:
            key = s.cli("keys", "create", "--name", "probe")
            s.cli("operators", "add", "--email", "ops@example.com", "--password-stdin", stdin="the right password 123\n")
            api = {"Authorization": f"Bearer {key}"}
            _, _, token = request("POST", s.base + "/v1/users/u-1/token", b"{}", dict(api, **{"Content-Type": "application/json"}))
            inbox = {"Authorization": "Bearer " + json.loads(token)["token"]}
            # An operator session through the login form.
            _, headers, page = request("GET", s.base + "/ui/login")
            cookie = next(v.split(";")[0] for k, v in headers.items() if k.lower() == "set-cookie" and "herald_login=" in v)
            csrf = re.search(rb'name="csrf" value="([^"]+)"', page).group(1).decode()
            form = urllib.parse.urlencode({"email": "ops@example.com", "password": "the right password 123", "csrf": csrf, "next": ""})
            _, headers, _ = request("POST", s.base + "/ui/login", form, {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"})
            session = next(v.split(";")[0] for k, v in headers.items() if k.lower() == "set-cookie" and "herald_session=" in v)
            ui = {"Cookie": session}
            cases = [
                ("GET", "/v1/outbox?cursor=%00", api),
                ("GET", "/v1/outbox?user_id=%00", api),
                ("GET", "/v1/outbox?rule_id=%00", api),
                ("GET", "/v1/rules/%00", api),
                ("POST", "/v1/outbox/%00/retry", api),
                ("GET", "/v1/inbox?cursor=%00", inbox),
                ("POST", "/v1/inbox/%00/seen", inbox),
                ("GET", "/ui/outbox/%00", ui),
                ("GET", "/ui/audit?before=%00", ui),
                ("GET", "/ui/rules/%00", ui),
            ]
            answers = []
            for method, path, headers in cases:
                status, _, _ = request(method, s.base + path, b"" if method == "POST" else None, headers)
                answers.append((f"{method} {path}", status))
            _, headers, page = request("GET", s.base + "/ui/login")
            cookie = next(v.split(";")[0] for k, v in headers.items() if k.lower() == "set-cookie" and "herald_login=" in v)
            csrf = re.search(rb'name="csrf" value="([^"]+)"', page).group(1).decode()
            body = f"email=ops%00@b.c&password=x&csrf={csrf}&next="
            status, _, _ = request("POST", s.base + "/ui/login", body, {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"})
            answers.append(("POST /ui/login email=ops%00@b.c (no session)", status))
            bad = [a for a in answers if not 400 <= a[1] < 500]
            result(
                "nul: every NUL URL of the review, on PostgreSQL",
                not bad,
                "; ".join(f"{what} -> {st}" for what, st in answers),
            )
    finally:
        subprocess.run(["psql", "-q", admin, "-c", f"DROP SCHEMA {schema} CASCADE"], capture_output=True)


def probe_tls(binary):
    certs = tempfile.mkdtemp(prefix="herald-probe-ca-")

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=certs, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=Herald Probe Private CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(certs, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    for mode, transport in [("starttls", "smtp://127.0.0.1:{port}?tls=required"), ("implicit", "smtps://127.0.0.1:{port}")]:
        port = free_port()
        sink_dir = tempfile.mkdtemp(prefix="herald-probe-sink-")
        sink = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests/smtp/server.py"), str(port), sink_dir, mode,
             os.path.join(certs, "server.pem"), os.path.join(certs, "server.key")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert sink.stdout.readline().strip() == "READY"
            env = {
                "HERALD_EMAIL__TRANSPORT": transport.format(port=port),
                "HERALD_EMAIL__FROM": "Herald <news@herald.test>",
                "HERALD_EMAIL__PUBLIC_URL": "https://herald.test",
                "HERALD_EMAIL__TLS_CA_FILE": os.path.join(certs, "ca.pem"),
                "HERALD_WORKER__POLL": "200ms",
            }
            with Server(binary, env=env) as s:
                payload = json.dumps({"to": "ok@example.org", "subject": "TLS probe", "text": "hello"})
                s.cli("enqueue", "--channel", "email", "--user-id", "u-tls", "--payload", payload)
                deadline = time.monotonic() + 60
                received = []
                while time.monotonic() < deadline and not received:
                    received = [f for f in os.listdir(sink_dir) if f.endswith(".eml")]
                    time.sleep(0.2)
                status = s.cli("status")
            result(
                f"tls: a message over {'STARTTLS' if mode == 'starttls' else 'implicit TLS'} with a private CA",
                len(received) == 1,
                f"{transport.format(port=port)} with email.tls_ca_file: {len(received)} message(s) received by "
                f"aiosmtpd; status: {' '.join(status.split())[:120]}",
            )
        finally:
            sink.stdin.close()
            sink.kill()
            sink.wait()


PROBES = {
    "bounce": probe_bounce,
    "logins": probe_logins,
    "slow-headers": probe_slow_headers,
    "nul": probe_nul,
    "tls": probe_tls,
}


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    binary = sys.argv[1]
    for name in sys.argv[2:] or list(PROBES):
        PROBES[name](binary)
    if FAILED:
        raise SystemExit(f"failed: {', '.join(FAILED)}")


if __name__ == "__main__":
    main()
