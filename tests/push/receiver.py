"""A Web Push service for tests, built on other people's cryptography:
`cryptography` verifies the VAPID JWT (RFC 8292) and `http_ece` decrypts
the aes128gcm body (RFC 8291), so Herald's own code checks nothing here.

Usage: receiver.py PORT LOG_FILE VAPID_PUBLIC_KEY

It makes one subscription key pair and prints
`READY {"p256dh": ..., "auth": ...}`. Every request is appended to LOG_FILE
as one JSON line (path, headers, JWT claims, decrypted payload or the
error, arrival time). Paths choose the answer:
  /push/ok/...     verify, decrypt, 201 with a Location header
  /push/gone/...   410, as a push service answers an expired subscription
  /push/busy/...   429 with Retry-After: 1 the first time, then as /ok
A request that fails verification or decryption gets 400 (or 403 for a
bad VAPID signature) with the reason, and the reason is logged.
"""

import base64
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64e(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


PORT = int(sys.argv[1])
LOG = sys.argv[2]
VAPID_PUBLIC = sys.argv[3]
ORIGIN = f"http://127.0.0.1:{PORT}"

UA_KEY = ec.generate_private_key(ec.SECP256R1())
UA_PUBLIC = UA_KEY.public_key().public_bytes(
    serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
)
AUTH = os.urandom(16)

LOCK = threading.Lock()
SEEN = set()


class Refused(Exception):
    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status


def verify_vapid(header):
    """Checks `vapid t=JWT, k=KEY` as a push service does; returns the claims."""
    if not header.startswith("vapid "):
        raise Refused(401, f"Authorization is not a vapid scheme: {header[:40]!r}")
    params = {}
    for part in header[len("vapid "):].split(","):
        name, _, value = part.strip().partition("=")
        params[name] = value
    if params.get("k") != VAPID_PUBLIC:
        raise Refused(403, "k= is not the application server key the subscription was made with")
    token = params.get("t", "")
    parts = token.split(".")
    if len(parts) != 3:
        raise Refused(401, "t= is not a compact JWS")
    jws_header = json.loads(b64d(parts[0]))
    if jws_header.get("alg") != "ES256":
        raise Refused(401, f"alg is {jws_header.get('alg')!r}, not ES256")
    raw = b64d(parts[2])
    if len(raw) != 64:
        raise Refused(401, f"the signature is {len(raw)} bytes, not r||s (64)")
    signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(params["k"]))
    try:
        key.verify(signature, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise Refused(403, "the VAPID signature does not verify with k=")
    claims = json.loads(b64d(parts[1]))
    now = time.time()
    if claims.get("aud") != ORIGIN:
        raise Refused(403, f"aud is {claims.get('aud')!r}, not this origin {ORIGIN}")
    exp = claims.get("exp")
    if not isinstance(exp, int) or exp <= now or exp > now + 24 * 3600:
        raise Refused(403, f"exp {exp!r} is not within the next 24 hours")
    sub = claims.get("sub", "")
    if not (sub.startswith("mailto:") or sub.startswith("https://")):
        raise Refused(403, f"sub {sub!r} is not a mailto: or https: contact")
    return claims


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        arrived = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        entry = {
            "path": self.path,
            "t": arrived,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body_len": len(body),
        }
        status, extra_headers, answer = 201, {}, b""
        try:
            kind = self.path.split("/")[2] if self.path.startswith("/push/") else ""
            if kind == "gone":
                raise Refused(410, "push subscription has unsubscribed or expired.")
            if kind == "busy":
                with LOCK:
                    first = self.path not in SEEN
                    SEEN.add(self.path)
                if first:
                    extra_headers["Retry-After"] = "1"
                    raise Refused(429, "too many requests")
            if kind not in ("ok", "busy"):
                raise Refused(404, f"no subscription at {self.path}")
            entry["claims"] = verify_vapid(self.headers.get("Authorization", ""))
            if self.headers.get("Content-Encoding") != "aes128gcm":
                raise Refused(400, f"Content-Encoding is {self.headers.get('Content-Encoding')!r}")
            if "TTL" not in self.headers:
                raise Refused(400, "no TTL header (RFC 8030 5.2 requires it)")
            try:
                plain = http_ece.decrypt(body, private_key=UA_KEY, auth_secret=AUTH, version="aes128gcm")
            except Exception as e:  # noqa: BLE001 - the reason goes to the log
                raise Refused(400, f"http_ece could not decrypt: {e!r}")
            entry["payload"] = json.loads(plain)
            extra_headers["Location"] = f"{ORIGIN}/message/{len(SEEN)}-{arrived}"
        except Refused as r:
            status, answer = r.status, str(r).encode()
            entry["error"] = str(r)
        entry["status"] = status
        with LOCK, open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")
        self.send_response(status)
        for k, v in extra_headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    print("READY " + json.dumps({"p256dh": b64e(UA_PUBLIC), "auth": b64e(AUTH)}), flush=True)
    # Ends when the test closes our stdin (or kills us).
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()


if __name__ == "__main__":
    main()
