#!/usr/bin/env python3
"""What a fan-out would cost the database if each outbox row were written once.

Issue 31 asks PostgreSQL to plan a fan-out at 100,000 rows/s and deliver a
million in 60 s, and SQLite and MariaDB to deliver 200,000 at 20,000/s. Today
the expander writes every recipient's outbox row as `scheduled` (the row and
its nine indexes), and the inbox lane then updates it to `sent`. The design
measured here as the alternative (not built) writes a narrow plan row
(trigger, rule, user, due; primary key on the first three) when expanding,
and the outbox row once, already `sent`, when the lane records it, deleting
the plan row in the same transaction.

This script does only the SQL of both designs, in one session, with no
Herald code: on a database migrated by `herald migrate` (the real schema,
every index) it subscribes N users to a topic, then for each design

  - plans N rows, 1,000 a transaction, as `plan_topic_chunk` does (design
    A: into the outbox, ON CONFLICT on the dedupe key; design B: into the
    plan table);
  - delivers them, 1,000 a transaction, writing what one inbox message costs
    an outcome flush: the outbox row (A: the update to `sent`; B: the insert
    as `sent` and the plan row's delete), the send-log row, the event and the
    inbox message.

Ids are time-ordered as Herald's are, and each batch is found by a range of
the primary key, so neither design pays for an index choice the other does
not. It prints seconds for planning and for delivery, per design, alternating
A B A B on a freshly emptied database each time.

    cargo build --release
    createdb -h 127.0.0.1 -U postgres once
    target/release/herald migrate --database-url postgres://postgres@127.0.0.1:5432/once
    python3 bench/fanout_insert_once.py postgres "psql -h 127.0.0.1 -U postgres -d once -q -v ON_ERROR_STOP=1"

    mysql -h 127.0.0.1 -uroot -e 'create database once'
    target/release/herald migrate --database-url mysql://root@127.0.0.1:3306/once
    python3 bench/fanout_insert_once.py mariadb "mysql -h 127.0.0.1 -uroot once"

    target/release/herald migrate --database-url sqlite:///tmp/once.db
    python3 bench/fanout_insert_once.py sqlite "sqlite3 /tmp/once.db"
"""

import argparse
import shlex
import subprocess
import time

TRIGGER = "t1"
RULE = "r1"


def outbox_id(dialect, place):
    """A time-ordered id whose middle is the recipient's place (from 1), as
    the fan-out's ids are; `place` is an SQL expression."""
    if dialect == "sqlite":
        return f"'01a2' || printf('%08x', {place}) || '000000000000000000000000'"
    if dialect == "mariadb":
        return f"CONCAT('01a2', LPAD(LOWER(HEX({place})), 8, '0'), '000000000000000000000000')"
    return f"'01a2' || lpad(to_hex({place}), 8, '0') || '000000000000000000000000'"


def literal_id(place):
    return f"'01a2{place:08x}'"


def concat(dialect, *parts):
    if dialect == "mariadb":
        return "CONCAT(" + ", ".join(parts) + ")"
    return " || ".join(parts)


def begin(dialect):
    return "BEGIN;" if dialect == "sqlite" else "START TRANSACTION;"


def setup(dialect, n):
    seq = {
        "postgres": f"SELECT 'b', 's' || lpad(g::text, 8, '0'), 0 FROM generate_series(0, {n - 1}) g",
        "mariadb": f"SELECT 'b', CONCAT('s', LPAD(seq, 8, '0')), 0 FROM seq_0_to_{n - 1}",
        "sqlite": "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < "
        f"{n - 1}) SELECT 'b', 's' || printf('%08d', n), 0 FROM g",
    }[dialect]
    text = "VARCHAR(64)" if dialect == "mariadb" else "TEXT"
    user = "VARCHAR(255)" if dialect == "mariadb" else "TEXT"
    tail = {"mariadb": " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin", "sqlite": " WITHOUT ROWID"}
    return f"""
DELETE FROM engagement_topic_subscriptions WHERE topic_key = 'b';
INSERT INTO engagement_topic_subscriptions (topic_key, user_id, created_at) {seq};
DROP TABLE IF EXISTS bench_plan;
CREATE TABLE bench_plan (trigger_id {text} NOT NULL, rule_id {text} NOT NULL, user_id {user} NOT NULL,
                         due_at BIGINT NOT NULL, PRIMARY KEY (trigger_id, rule_id, user_id)){tail.get(dialect, '')};
"""


def empty(dialect):
    tables = ["engagement_inbox", "engagement_events", "engagement_sends", "engagement_outbox", "bench_plan"]
    if dialect == "postgres":
        return f"TRUNCATE {', '.join(tables)} CASCADE; CHECKPOINT;"
    return "".join(f"DELETE FROM {t};" for t in tables)


def plan(dialect, design, n, batch):
    ignore = {"postgres": "", "mariadb": "IGNORE", "sqlite": "OR IGNORE"}[dialect]
    conflict = {"postgres": "ON CONFLICT DO NOTHING"}.get(dialect, "")
    out = []
    for b in range(n // batch):
        lo = f"'s{b * batch - 1:08d}'" if b else "'s'"
        hi = f"'s{b * batch + batch - 1:08d}'"
        rank = f"{b * batch} + ROW_NUMBER() OVER (ORDER BY s.user_id)"
        where = f"s.topic_key = 'b' AND s.user_id > {lo} AND s.user_id <= {hi}"
        out.append(begin(dialect))
        if design == "A":
            key = concat(dialect, f"'{TRIGGER}:{RULE}:'", "s.user_id")
            out.append(
                f"INSERT {ignore} INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel,"
                " payload, status, due_at, attempts, created_at, updated_at)"
                f" SELECT {outbox_id(dialect, rank)}, {key}, '{RULE}', '{TRIGGER}', s.user_id, 'inbox',"
                f" '{{\"title\":\"x\"}}', 'scheduled', 1, 0, 1, 1"
                f" FROM engagement_topic_subscriptions s WHERE {where} {conflict};"
            )
        else:
            out.append(
                f"INSERT {ignore} INTO bench_plan (trigger_id, rule_id, user_id, due_at)"
                f" SELECT '{TRIGGER}', '{RULE}', s.user_id, 1 FROM engagement_topic_subscriptions s"
                f" WHERE {where} {conflict};"
            )
        out.append("COMMIT;")
    return "\n".join(out)


def deliver(dialect, design, n, batch):
    ignore = {"postgres": "", "mariadb": "IGNORE", "sqlite": "OR IGNORE"}[dialect]
    conflict = {"postgres": "ON CONFLICT DO NOTHING"}.get(dialect, "")
    out = []
    position = 0
    for b in range(n // batch):
        ids = f"o.id >= {literal_id(b * batch + 1)} AND o.id < {literal_id(b * batch + batch + 1)}"
        out.append(begin(dialect))
        if design == "A":
            out.append(
                "UPDATE engagement_outbox AS o SET status = 'sent', attempts = attempts + 1, updated_at = 2,"
                f" claim_token = NULL WHERE {ids} AND o.status = 'scheduled';"
            )
        else:
            lo = f"'s{b * batch - 1:08d}'" if b else "'s'"
            hi = f"'s{b * batch + batch - 1:08d}'"
            taken = f"p.trigger_id = '{TRIGGER}' AND p.rule_id = '{RULE}' AND p.user_id > {lo} AND p.user_id <= {hi}"
            rank = f"{b * batch} + ROW_NUMBER() OVER (ORDER BY p.user_id)"
            key = concat(dialect, f"'{TRIGGER}:{RULE}:'", "p.user_id")
            out.append(
                f"INSERT {ignore} INTO engagement_outbox (id, dedupe_key, rule_id, trigger_id, user_id, channel,"
                " payload, status, due_at, attempts, created_at, updated_at)"
                f" SELECT {outbox_id(dialect, rank)}, {key}, '{RULE}', '{TRIGGER}', p.user_id, 'inbox',"
                f" '{{\"title\":\"x\"}}', 'sent', 1, 1, 1, 2 FROM bench_plan p WHERE {taken} {conflict};"
            )
            out.append(f"DELETE FROM bench_plan WHERE {taken.replace('p.', '')};")
        derived = lambda c: concat(dialect, f"'{c}'", "SUBSTR(o.id, 2)")  # noqa: E731
        out.append(
            "INSERT INTO engagement_sends (id, outbox_id, rule_id, trigger_id, user_id, channel, status, attempts,"
            f" created_at) SELECT {derived(1)}, o.id, '{RULE}', '{TRIGGER}', o.user_id, 'inbox', 'sent', 1, 2"
            f" FROM engagement_outbox o WHERE {ids};"
        )
        out.append(
            "INSERT INTO engagement_events (id, position, kind, user_id, outbox_id, payload, created_at)"
            f" SELECT {derived(2)}, {position} + ROW_NUMBER() OVER (ORDER BY o.id), 'sent', o.user_id, o.id, '{{}}', 2"
            f" FROM engagement_outbox o WHERE {ids};"
        )
        position += 2 * batch
        out.append(
            "INSERT INTO engagement_inbox (id, position, outbox_id, user_id, title, created_at)"
            f" SELECT {derived(3)}, {position} + ROW_NUMBER() OVER (ORDER BY o.id), o.id, o.user_id, 'x', 2"
            f" FROM engagement_outbox o WHERE {ids};"
        )
        position += 2 * batch
        out.append("COMMIT;")
    return "\n".join(out)


def run(cli, sql):
    started = time.monotonic()
    subprocess.run(shlex.split(cli), input=sql, text=True, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dialect", choices=["postgres", "mariadb", "sqlite"])
    ap.add_argument("cli", help="the database's command-line client, reading SQL on stdin")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    batch = 1000
    n = args.rows - args.rows % batch
    # SQLite's settings as Herald's writer has them (src/store/sql.rs).
    pragmas = "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA cache_size = -65536; " \
        "PRAGMA temp_store = MEMORY;\n" if args.dialect == "sqlite" else ""
    run(args.cli, pragmas + setup(args.dialect, n))
    print(f"{args.dialect}, {n} rows, {batch} a transaction: seconds to plan + to deliver = total")
    for _ in range(args.rounds):
        for design in "AB":
            run(args.cli, pragmas + empty(args.dialect))
            planning = run(args.cli, pragmas + plan(args.dialect, design, n, batch))
            delivery = run(args.cli, pragmas + deliver(args.dialect, design, n, batch))
            name = "A, planned into the outbox " if design == "A" else "B, plan row, outbox once  "
            print(f"  {name} {planning:6.2f} + {delivery:6.2f} = {planning + delivery:6.2f}")
    run(args.cli, "DROP TABLE bench_plan;")


if __name__ == "__main__":
    main()
