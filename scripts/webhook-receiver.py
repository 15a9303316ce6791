#!/usr/bin/env python3
"""A webhook receiver for trying Herald on one machine: prints each POST
(the Standard Webhooks headers and the JSON body) and answers 204.

    python3 scripts/webhook-receiver.py 9000

Listens on 127.0.0.1 only. With HERALD_WEBHOOK_SECRET=whsec_... in the
environment it also checks each signature (HMAC-SHA256 over
"id.timestamp.body", base64, as webhook-signature "v1,<sig>") and says
whether it matched.
"""
import base64
import hashlib
import hmac
import http.server
import json
import os
import sys


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        wid, ts, sig = (self.headers.get(h, "") for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
        print(f"POST {self.path}  webhook-id: {wid}  webhook-timestamp: {ts}", flush=True)
        secret = os.environ.get("HERALD_WEBHOOK_SECRET", "")
        if secret.startswith("whsec_"):
            key = base64.b64decode(secret[len("whsec_"):])
            expected = base64.b64encode(hmac.new(key, f"{wid}.{ts}.".encode() + body, hashlib.sha256).digest())
            ok = any(s.split(",", 1)[-1].encode() == expected for s in sig.split())
            print(f"  signature: {'valid' if ok else 'INVALID'}", flush=True)
        try:
            print(json.dumps(json.loads(body), indent=2), flush=True)
        except ValueError:
            print(body.decode(errors="replace"), flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
