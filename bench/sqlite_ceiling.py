#!/usr/bin/env python3
"""How fast SQLite itself can write what a drain writes, with no Herald code.

Issue 12 asks for a SQLite drain of 50,000 rows/s. Herald's own statement
log puts its writer's SQL at about 24 us a row, which would cap the drain
near 41,000 rows/s even if everything else Herald does were free. This
script checks that figure from outside Herald: on a database migrated by
`herald migrate` (the real schema, every index), it performs exactly the
writes one delivered inbox message costs in an outcome flush, 1,000 rows a
transaction, from Python's C-level `executemany` (one prepared statement
per table, stepped once per row, no JSON, no round trips to another
thread):

  - the fenced update of the outbox row (`scheduled` -> `sent`, by primary
    key and version, as the direct lane's flush does);
  - the send-log row;
  - the position counter (once per flush);
  - the `outcome` event;
  - the inbox message.

It prints the time each of those took per row, the commits' time, and
rows/s with and without the commits. The ids are time-ordered like
Herald's UUIDv7s (random ids would scatter the inserts and measure the
wrong thing), the rows are built before the clock starts, and the database
is fresh for every run.

    cargo build --release
    HERALD_DATABASE_URL=sqlite:///tmp/ceiling.db target/release/herald migrate
    python3 bench/sqlite_ceiling.py /tmp/ceiling.db --rows 100000

`--without-events` leaves the event out and `--rowid-send-log` gives the
send log an integer row id instead of its text primary key (its `id` kept,
unindexed): two changes to the data model, measured to see what they would
buy. Python's sqlite3 links the system's SQLite (3.40 on Debian 12), not the
3.46 Herald bundles, so compare the SQL time per row, not the commits.
"""

import argparse
import itertools
import json
import os
import shutil
import sqlite3
import tempfile
import time

USERS = 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("database", help="a SQLite file migrated by `herald migrate` (copied, never written)")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000, help="rows per transaction (Herald's flush: up to 1,000)")
    ap.add_argument("--without-events", action="store_true")
    ap.add_argument("--rowid-send-log", action="store_true")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="herald-ceiling-")
    try:
        db = os.path.join(work, "run.db")
        shutil.copy(args.database, db)
        print(json.dumps(run(db, args)))
    finally:
        shutil.rmtree(work)


def run(db, args):
    c = sqlite3.connect(db, isolation_level=None)
    # Herald's writer connection: see `sqlite_pool` in src/store/sql.rs.
    for pragma in (
        "journal_mode = WAL",
        "synchronous = FULL",
        "mmap_size = 0",
        "temp_store = MEMORY",
        "cache_size = -65536",
    ):
        c.execute("PRAGMA " + pragma)
    if args.rowid_send_log:
        c.executescript(
            """DROP TABLE engagement_sends;
            CREATE TABLE engagement_sends (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, outbox_id TEXT NOT NULL,
                rule_id TEXT, trigger_id TEXT, user_id TEXT NOT NULL, channel TEXT NOT NULL, transport TEXT,
                address_hash TEXT, status TEXT NOT NULL, detail TEXT, attempts INTEGER NOT NULL DEFAULT 0,
                created_at INTEGER NOT NULL);
            CREATE INDEX engagement_sends_user ON engagement_sends (user_id, created_at);
            CREATE INDEX engagement_sends_outbox ON engagement_sends (outbox_id);
            CREATE INDEX engagement_sends_address ON engagement_sends (address_hash, created_at)
                WHERE address_hash IS NOT NULL;"""
        )
    c.execute("INSERT OR IGNORE INTO engagement_sequences (name, last) VALUES ('stream', 0)")

    now = int(time.time() * 1000)
    seq = itertools.count()

    def new_id():
        # Time-ordered like a UUIDv7: 48 bits of milliseconds first.
        h = "%012x%04x" % (now, next(seq) % 65536) + os.urandom(8).hex()
        return f"{h[:8]}-{h[8:12]}-7{h[13:16]}-{h[16:20]}-{h[20:32]}"

    rule = new_id()
    outbox = []
    for i in range(args.rows):
        oid, tid, user = new_id(), new_id(), f"user-{i % USERS}"
        payload = json.dumps({"title": "Welcome", "n": i})
        outbox.append((oid, f"{rule}:{tid}:{user}", rule, tid, user, "inbox", payload, "scheduled", now, now, now))
    c.execute("BEGIN")
    c.executemany(
        "INSERT INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel, payload, status, "
        "due_at, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        outbox,
    )
    c.execute("COMMIT")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # Every flush's parameters, built before the clock starts.
    at, stamp = now + 1, "2026-12-04T17:00:00.000Z"
    flushes = []
    for start in range(0, args.rows, args.batch):
        part = outbox[start : start + args.batch]
        flushes.append(
            (
                [(at, r[0], r[10]) for r in part],
                [(new_id(), r[0], r[2], r[3], r[4], "inbox", "inbox", None, "sent", None, 1, at) for r in part],
                [
                    (new_id(), "outcome", r[4], r[0], json.dumps(outcome_event(r, stamp)), at)
                    for r in part
                ],
                [
                    (new_id(), r[0], r[4], "Welcome, friend", "Thanks for joining. Here is what to do next.",
                     "https://example.com/start", "{}", at)
                    for r in part
                ],
            )
        )

    spent = dict.fromkeys(["outbox_update", "send_log", "positions", "events", "inbox", "commit"], 0.0)

    def timed(phase, f):
        t = time.perf_counter()
        out = f()
        spent[phase] += time.perf_counter() - t
        return out

    started = time.perf_counter()
    for update, sends, events, inbox in flushes:
        n = len(update)
        per_message = (0 if args.without_events else n) + n
        c.execute("BEGIN IMMEDIATE")
        timed("outbox_update", lambda: c.executemany(
            "UPDATE engagement_outbox SET status = 'sent', last_error = NULL, claim_token = NULL, "
            "attempts = attempts + 1, updated_at = ? WHERE id = ? AND updated_at = ? AND +status = 'scheduled'",
            update,
        ))
        timed("send_log", lambda: c.executemany(
            "INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, transport, "
            "address_hash, status, detail, attempts, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            sends,
        ))
        (last,) = timed("positions", lambda: c.execute(
            "UPDATE engagement_sequences SET last = last + ? WHERE name = 'stream' RETURNING last", (per_message,)
        ).fetchone())
        first = last - per_message + 1
        if not args.without_events:
            timed("events", lambda: c.executemany(
                "INSERT INTO engagement_events (position, id, kind, user_id, outbox_id, payload, created_at) "
                "VALUES (?,?,?,?,?,?,?)",
                [(first + k,) + e for k, e in enumerate(events)],
            ))
            first += n
        timed("inbox", lambda: c.executemany(
            "INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, body, url, data, created_at) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            [(m[0], first + k) + m[1:] for k, m in enumerate(inbox)],
        ))
        timed("commit", lambda: c.execute("COMMIT"))
    elapsed = time.perf_counter() - started
    sent = c.execute("SELECT COUNT(*) FROM engagement_outbox WHERE status = 'sent'").fetchone()[0]
    assert sent == args.rows, f"{sent} of {args.rows} rows updated: the fence did not match"

    sql = sum(v for k, v in spent.items() if k != "commit")
    return {
        "sqlite": sqlite3.sqlite_version,
        "rows": args.rows,
        "batch": args.batch,
        "without_events": args.without_events,
        "rowid_send_log": args.rowid_send_log,
        "us_per_row": {k: round(v / args.rows * 1e6, 2) for k, v in spent.items()},
        "sql_us_per_row": round(sql / args.rows * 1e6, 2),
        "rows_per_sec_sql_only": round(args.rows / sql),
        "rows_per_sec_with_commits": round(args.rows / elapsed),
    }


def outcome_event(r, stamp):
    return {
        "outbox_id": r[0], "user_id": r[4], "rule_id": r[2], "trigger_id": r[3], "channel": "inbox",
        "status": "sent", "detail": None, "transport": "inbox", "address_hash": None, "attempts": 1, "at": stamp,
    }


if __name__ == "__main__":
    main()
