"""A scriptable SMTP server for Herald's email tests (aiosmtpd).

Usage: python3 server.py PORT DIR [starttls|implicit CERT KEY]

With a TLS mode, the server offers STARTTLS (and refuses mail before it)
or speaks TLS from the first byte (implicit TLS, as on port 465), with the
certificate chain in CERT and its key in KEY (PEM).

Listens on 127.0.0.1:PORT, prints "READY" on stdout once it accepts
connections, and runs until killed or until its stdin closes.

The recipient's local part picks the answer:
  ok*         250, the message is written to DIR/<n>.eml
  defer*      451 4.3.0 at RCPT
  closing*    421 4.3.2 at RCPT
  drop*       the connection is closed in the middle of DATA (no reply)
  nouser*     550 5.1.1 at RCPT
  policy*     554 5.7.1 at DATA
  slow*       250 like ok, two seconds after DATA (so that messages are in
              flight when a test kills something)
  anything else: 250, like ok

Every new connection appends a line to DIR/connections.log, so a test can
prove that no connection was made.
"""

import asyncio
import os
import ssl
import sys
import threading

from aiosmtpd.controller import Controller


class Handler:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.count = 0
        self.lock = threading.Lock()

    def _log_connection(self, peer):
        with self.lock:
            with open(os.path.join(self.out_dir, "connections.log"), "a") as f:
                f.write(f"{peer}\n")

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        self._log_connection(session.peer)
        session.host_name = hostname
        return responses

    async def handle_HELO(self, server, session, envelope, hostname):
        self._log_connection(session.peer)
        session.host_name = hostname
        return "250 {}".format(server.hostname)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.split("@", 1)[0].lower()
        if local.startswith("defer"):
            return "451 4.3.0 Temporary failure, try again later"
        if local.startswith("closing"):
            return "421 4.3.2 Service shutting down"
        if local.startswith("nouser"):
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        local = envelope.rcpt_tos[0].split("@", 1)[0].lower() if envelope.rcpt_tos else ""
        if local.startswith("drop"):
            server.transport.close()
            return None
        if local.startswith("policy"):
            return "554 5.7.1 Message rejected by policy"
        if local.startswith("slow"):
            await asyncio.sleep(2)
        with self.lock:
            self.count += 1
            n = self.count
        path = os.path.join(self.out_dir, f"{n:06d}.eml")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(envelope.original_content or envelope.content)
        os.replace(tmp, path)
        return "250 2.0.0 Message accepted"


def main():
    port = int(sys.argv[1])
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    kwargs = {}
    if len(sys.argv) > 3:
        mode, cert, key = sys.argv[3], sys.argv[4], sys.argv[5]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if mode == "starttls":
            kwargs = {"tls_context": context, "require_starttls": True}
        elif mode == "implicit":
            kwargs = {"ssl_context": context}
        else:
            raise SystemExit(f"unknown TLS mode {mode!r}")
    controller = Controller(Handler(out_dir), hostname="127.0.0.1", port=port, decode_data=False, **kwargs)
    controller.start()
    print("READY", flush=True)
    try:
        # Exit when the test that started us goes away.
        sys.stdin.read()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
