#!/usr/bin/env python3
"""Run the shell blocks a reader is told to paste, as written, and check them.

    python3 .ci/doc-blocks.py                    # README.md, docs/getting-started.md, docs/channels/push.md
    python3 .ci/doc-blocks.py docs/getting-started.md

Each file's ```sh blocks run in order in one bash session, as a reader pastes
them into one terminal, in a scratch copy of the repository (its `target/` a
link to this one's, so nothing is rebuilt that `cargo build` already built)
with TMPDIR inside the scratch directory and no HERALD_* variable set. Two
HTML comments, invisible on GitHub, steer it:

    <!-- ci: skip: why -->       on the line before a block: not run here
    <!-- ci: expect: REGEX -->   on a line after a block: its output (stdout and
                                 stderr, background jobs' included) must match

A file fails when a block's expectation is not met, when the session does not
reach its end within --timeout seconds, or when a process it started listens
on anything but 127.0.0.1 or ::1. The ports the blocks use (PORTS) must be
free before a file starts and free again when it ends. Whatever the session
started is stopped at the end: SIGTERM to its process group, SIGKILL after 10 s.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_FILES = ["README.md", "docs/getting-started.md", "docs/channels/push.md"]
# herald serve (http.listen's default), the webhook receiver, the widget page.
PORTS = [8080, 9000, 8000]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
SKIP = re.compile(r"^<!--\s*ci:\s*skip\b.*-->\s*$")
EXPECT = re.compile(r"^<!--\s*ci:\s*expect:\s*(.*?)\s*-->\s*$")


def blocks(path):
    """[(line, text, skip, [expect regexes])] for every sh/bash block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in ("sh", "bash"):
            continue
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        skip = before >= 0 and SKIP.match(lines[before].strip()) is not None
        expects = []
        after = i
        while after < len(lines):
            stripped = lines[after].strip()
            e = EXPECT.match(stripped)
            if e:
                expects.append(e.group(1))
            elif stripped:
                break
            after += 1
        out.append((start + 1, "\n".join(body), skip, expects))
    return out


def scratch_copy(dest):
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split("\0")
    for name in filter(None, names):
        src = os.path.join(ROOT, name)
        if not os.path.isfile(src):
            continue  # deleted in the work tree
        os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, name))  # keeps mtimes: cargo sees nothing new
    os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
    os.symlink(os.path.join(ROOT, "target"), os.path.join(dest, "target"))


def port_in_use(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def session_pids(sid):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def listening(pids):
    """{(address, port)} that the processes listen on over TCP."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
    found = set()
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            addr, port = cols[1].split(":")
            raw = bytes.fromhex(addr)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                text = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                text = socket.inet_ntop(socket.AF_INET, raw[::-1])
            found.add((text, int(port, 16)))
    return found


def stop(pgid):
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            if not session_pids(pgid):
                return
            time.sleep(0.2)


def run_file(rel, scratch, timeout):
    path = os.path.join(ROOT, rel)
    found = blocks(path)
    busy = [p for p in PORTS if port_in_use(p)]
    if busy:
        return [f"{rel}: port(s) {busy} already in use on 127.0.0.1; the blocks need them free"]
    script = ["set -o pipefail 2>/dev/null", f"cd {scratch}/repo"]
    for n, (line, text, skip, _) in enumerate(found):
        if skip:
            continue
        script += [f"printf '\\n@@ci-block {n} (line {line})\\n'", text, f"printf '\\n@@ci-block-end {n}\\n'"]
    script.append("printf '\\n@@ci-session-end\\n'")
    script_path = os.path.join(scratch, "session.sh")
    with open(script_path, "w") as f:
        f.write("\n".join(script) + "\n")
    log_path = os.path.join(scratch, "session.log")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env["TMPDIR"] = os.path.join(scratch, "tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    started = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", script_path], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    exposed = set()
    timed_out = False
    while proc.poll() is None:
        for addr, port in listening(session_pids(proc.pid)):
            if addr not in ("127.0.0.1", "::1"):
                exposed.add(f"{addr}:{port}")
        if time.time() - started > timeout:
            timed_out = True
            break
        time.sleep(0.25)
    took = time.time() - started
    stop(proc.pid)
    proc.wait()
    with open(log_path, errors="replace") as f:
        output = f.read()
    sys.stdout.write(f"--- {rel}: the session's output ---\n{output}\n--- end of {rel} ({took:.1f} s) ---\n")

    problems = []
    if timed_out:
        problems.append(f"{rel}: did not finish within {timeout} s")
    elif "@@ci-session-end" not in output:
        problems.append(f"{rel}: the session stopped before its last block (exit status {proc.returncode})")
    for addr in sorted(exposed):
        problems.append(f"{rel}: a process the blocks started listened on {addr}, not on loopback")
    for n, (line, _, skip, expects) in enumerate(found):
        if skip:
            print(f"{rel}:{line}: skipped (<!-- ci: skip -->)")
            continue
        m = re.search(rf"@@ci-block {n} \(line {line}\)\n(.*?)(?=@@ci-block |@@ci-session-end|\Z)", output, re.S)
        seen = m.group(1) if m else ""
        for e in expects:
            if not re.search(e, seen, re.M):
                problems.append(f"{rel}:{line}: the block's output does not match /{e}/")
        print(f"{rel}:{line}: ran, {len(expects)} expectation(s)")
    still = [p for p in PORTS if port_in_use(p)]
    if still:
        problems.append(f"{rel}: port(s) {still} still in use after the session was stopped")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per file (default 300)")
    args = parser.parse_args()
    problems = []
    with tempfile.TemporaryDirectory(prefix="herald-doc-blocks-") as scratch:
        os.makedirs(os.path.join(scratch, "repo"))
        scratch_copy(os.path.join(scratch, "repo"))
        for rel in args.files:
            problems += run_file(rel, scratch, args.timeout)
    for p in problems:
        print(p)
    print("doc blocks: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
