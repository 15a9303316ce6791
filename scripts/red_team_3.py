#!/usr/bin/env python3
"""The third outside review's probes (issue 27), re-run against a herald binary.

    python3 scripts/red_team_3.py target/release/herald [PROBE ...]

PROBE is any of: prefs-race, first-write-race, array-bodies, stream-ids,
problems, future-trigger, stream-revoke, token-expiry (default: all;
token-expiry takes a minute). The two races run on
SQLite, and on PostgreSQL and MariaDB too when HERALD_TEST_POSTGRES_URL /
HERALD_TEST_MYSQL_URL name a server (each probe makes its own schema or
database there and drops it after).

These are the reviewer's reproductions, from the outside: each starts its own
`herald serve` on 127.0.0.1 (see red_team.py's Server), is bounded in
requests and time, prints one line per probe and database, and exits non-zero
when a finding is back. The regression tests behind each item are the proof;
this is the same check an integrator would make by hand.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import red_team  # noqa: E402
from red_team import Server, request, result  # noqa: E402


def backends():
    """(name, database_url or None, cleanup) for each database to probe."""
    yield "sqlite", None, lambda: None
    pg = os.environ.get("HERALD_TEST_POSTGRES_URL")
    if pg:
        schema = "probe_" + uuid.uuid4().hex[:10]
        subprocess.run(["psql", "-q", pg, "-c", f"CREATE SCHEMA {schema}"], check=True)
        sep = "&" if "?" in pg else "?"
        url = f"{pg}{sep}options=-c%20search_path%3D{schema}"
        quiet = dict(os.environ, PGOPTIONS="--client-min-messages=warning")
        yield "postgres", url, lambda: subprocess.run(["psql", "-q", pg, "-c", f"DROP SCHEMA {schema} CASCADE"], env=quiet)
    my = os.environ.get("HERALD_TEST_MYSQL_URL")
    if my:
        name = "probe_" + uuid.uuid4().hex[:10]
        mysql = ["mysql", "--protocol=tcp", "-h", "127.0.0.1", "-uroot", "-e"]
        subprocess.run(mysql + [f"CREATE DATABASE {name}"], check=True)
        yield "mysql", my.rsplit("/", 1)[0] + "/" + name, lambda: subprocess.run(mysql + [f"DROP DATABASE {name}"])


class Api:
    def __init__(self, server, key):
        self.base, self.key = server.base, key

    def call(self, method, path, body=None, token=None, headers=None):
        h = {"Authorization": f"Bearer {token or self.key}", **(headers or {})}
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        status, hdrs, answer = request(method, self.base + path, data, h)
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = answer[:200]
        return status, hdrs, parsed


def rule(api, category, trigger_type="probe.event", channel="inbox"):
    status, _, answer = api.call("POST", "/v1/rules", {
        "name": f"probe {category}", "trigger_type": trigger_type, "channel": channel,
        "category": category, "enabled": True,
        "template": {"fallback_locale": "en", "locales": {"en": {"subject": "Hi", "text": "Hello"}}},
    })
    assert status == 201, (status, answer)


def user_token(api, user):
    status, _, answer = api.call("POST", f"/v1/users/{user}/token")
    assert status == 200, (status, answer)
    return answer["token"]


def probe_prefs_race(binary, rounds=25):
    """Item 1: four simultaneous PUT /v1/inbox/preferences, one category each: all four kept."""
    for name, url, cleanup in backends():
        try:
            with Server(binary, database_url=url) as s:
                api = Api(s, s.cli("keys", "create", "--name", "probe"))
                categories = [f"cat{i}" for i in range(4)]
                for c in categories:
                    rule(api, c)
                lost = 0
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    for r in range(rounds):
                        user = f"race-{r}"
                        if r % 2 == 0:  # odd rounds: a user Herald has never seen
                            api.call("PUT", f"/v1/users/{user}", {"name": user})
                        token = user_token(api, user)
                        answers = list(pool.map(lambda c: api.call(
                            "PUT", "/v1/inbox/preferences", {"categories": {c: {"inbox": False}}}, token=token)[0],
                            categories))
                        assert all(a == 200 for a in answers), answers
                        _, _, now = api.call("GET", "/v1/inbox/preferences", token=token)
                        kept = json.dumps(now)
                        lost += sum(1 for c in categories if f'"{c}"' not in kept)
                result(f"prefs-race/{name}", lost == 0,
                       f"{rounds} rounds of 4 simultaneous changes: {lost} choice(s) lost")
        finally:
            cleanup()


def probe_first_write_race(binary, rounds=100):
    """Item 7: a recipient first written by concurrent requests is never a 500."""
    for name, url, cleanup in backends():
        try:
            with Server(binary, database_url=url) as s:
                api = Api(s, s.cli("keys", "create", "--name", "probe"))
                rule(api, "news")
                statuses = []
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    for r in range(rounds):
                        user = f"new-{r}"
                        statuses += pool.map(lambda i: api.call(
                            "PUT", f"/v1/users/{user}", {"email": f"{user}@example.com"})[0], range(4))
                    for r in range(rounds // 2):
                        token = user_token(api, f"unknown-{r}")
                        statuses += pool.map(lambda i: api.call(
                            "PUT", "/v1/inbox/preferences", {"categories": {"news": {"inbox": i % 2 == 0}}},
                            token=token)[0], range(4))
                errors = [st for st in statuses if st >= 500]
                result(f"first-write-race/{name}", not errors,
                       f"{len(statuses)} concurrent first writes: {len(errors)} answered 5xx")
        finally:
            cleanup()


def probe_array_bodies(binary):
    """Item 6: a JSON array is never read into a struct by position."""
    with Server(binary) as s:
        api = Api(s, s.cli("keys", "create", "--name", "probe"))
        cases = [("PUT", "/v1/users/x", ["x@example.com"]), ("POST", "/v1/triggers", ["t", "u"]),
                 ("POST", "/v1/suppressions", ["a@example.com"]), ("POST", "/v1/rules", ["a"] * 16)]
        bad = []
        for method, path, body in cases:
            status, hdrs, answer = api.call(method, path, body)
            text = json.dumps(answer)
            if status != 422 or "RuleInput" in text or "elements" in text:
                bad.append(f"{method} {path} -> {status} {text[:120]}")
        _, _, suppressed = api.call("GET", "/v1/suppressions?email=a%40example.com")
        if suppressed and json.dumps(suppressed).count("a@example.com") and "*" in json.dumps(suppressed):
            bad.append("a@example.com was suppressed for all categories")
        result("array-bodies", not bad, "; ".join(bad) or f"{len(cases)} array bodies refused with 422 naming body")


def probe_stream_ids(binary):
    """Item 12: a malformed Last-Event-ID is a 400, on both streams."""
    with Server(binary) as s:
        api = Api(s, s.cli("keys", "create", "--name", "probe"))
        token = user_token(api, "ada")
        bad = []
        for value in ["abc", "1e3", "3.0", "99999999999999999999", "-1"]:
            for path, credential in [("/v1/events/stream", None), ("/v1/inbox/stream", token)]:
                status, hdrs, _ = api.call("GET", path, token=credential, headers={"Last-Event-ID": value})
                if status != 400 or "problem+json" not in hdrs.get("Content-Type", ""):
                    bad.append(f"{path} Last-Event-ID {value} -> {status}")
        result("stream-ids", not bad, "; ".join(bad) or "10 malformed ids answered 400 problem+json")


def probe_problems(binary):
    """Item 19: every error is application/problem+json; query errors are 422s naming the parameter."""
    with Server(binary) as s:
        api = Api(s, s.cli("keys", "create", "--name", "probe"))
        bad = []
        for method, path, want in [("DELETE", "/v1/triggers", 405), ("GET", "/v1/nothing-here", 404),
                                   ("GET", "/v1/outbox?limit=abc", 422), ("GET", "/v1/outbox?limit=-1", 422),
                                   ("GET", "/v1/outbox?cursor=%%%", 422)]:
            status, hdrs, answer = api.call(method, path)
            if status != want or "problem+json" not in hdrs.get("Content-Type", ""):
                bad.append(f"{method} {path} -> {status} {hdrs.get('Content-Type')}")
        status, _, _ = api.call("POST", "/v1/triggers", {"type": "t", "user_id": "u", "payload": None})
        if status != 422:
            bad.append(f"payload null -> {status}")
        result("problems", not bad, "; ".join(bad) or "405, 404, bad limit, bad cursor and null payload all problems")


def probe_future_trigger(binary):
    """Item 4: a trigger dated a month ahead is refused, naming occurred_at."""
    with Server(binary) as s:
        api = Api(s, s.cli("keys", "create", "--name", "probe"))
        ahead = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * 86400))
        status, _, answer = api.call("POST", "/v1/triggers",
                                     {"type": "probe.event", "user_id": "u", "occurred_at": ahead})
        ok = status == 422 and "occurred_at" in json.dumps(answer)
        result("future-trigger", ok, f"occurred_at 30 days ahead -> {status} {json.dumps(answer)[:160]}")


def probe_stream_revoke(binary, bound_s=15):
    """Item 2: an event stream ends within the key cache's 5 s after `herald keys revoke`."""
    import http.client
    with Server(binary) as s:
        key = s.cli("keys", "create", "--name", "probe")
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=bound_s + 5)
        conn.request("GET", "/v1/events/stream", headers={"Authorization": f"Bearer {key}"})
        r = conn.getresponse()
        assert r.status == 200, r.status
        r.fp.readline()
        key_id = s.cli("keys", "list").split()[0]
        s.cli("keys", "revoke", key_id)
        revoked = time.monotonic()
        ended = seconds_until_end(r, revoked, bound_s)
        conn.close()
        result("stream-revoke", ended is not None and ended <= 7,
               f"stream ended {ended:.1f} s after revocation" if ended is not None else f"still open after {bound_s} s")


def seconds_until_end(response, since, bound_s):
    """Seconds from `since` until the stream's `end` event or its connection
    closing, or None past `bound_s`. The raw socket is read (chunked framing
    and all): a kept-alive connection outlives the response, so the `end`
    event is what says the stream is over."""
    while time.monotonic() - since < bound_s:
        line = response.fp.readline()
        if not line or line.startswith(b"event: end"):
            return time.monotonic() - since
    return None


def probe_token_expiry(binary):
    """Item 2: an inbox stream ends at its token's `exp` (here one minute, the shortest `inbox.token_ttl`)."""
    import http.client
    with Server(binary, env={"HERALD_INBOX__TOKEN_TTL": "1m"}) as s:
        api = Api(s, s.cli("keys", "create", "--name", "probe"))
        token = user_token(api, "ada")
        issued = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=90)
        conn.request("GET", "/v1/inbox/stream", headers={"Authorization": f"Bearer {token}"})
        r = conn.getresponse()
        assert r.status == 200, r.status
        ended = seconds_until_end(r, issued, 80)
        conn.close()
        result("token-expiry", ended is not None and 55 <= ended <= 63,
               f"stream ended {ended:.1f} s after a one-minute token was issued" if ended else "still open at 80 s")


PROBES = {
    "prefs-race": probe_prefs_race,
    "first-write-race": probe_first_write_race,
    "array-bodies": probe_array_bodies,
    "stream-ids": probe_stream_ids,
    "problems": probe_problems,
    "future-trigger": probe_future_trigger,
    "stream-revoke": probe_stream_revoke,
    "token-expiry": probe_token_expiry,
}


def main():
    binary, wanted = sys.argv[1], sys.argv[2:] or list(PROBES)
    for name in wanted:
        try:
            PROBES[name](binary)
        except Exception as e:  # a probe that could not run is a failure, not a pass
            result(name, False, f"could not run: {e!r}")
    sys.exit(1 if red_team.FAILED else 0)


if __name__ == "__main__":
    main()
