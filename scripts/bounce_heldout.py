#!/usr/bin/env python3
"""Held-out check of the bounce parser on the public sisimai messages that are
NOT in tests/data/bounces (no rule was written from them).

Data (BSD-2-Clause, not shipped here): a clone of github.com/sisimai/set-of-emails
(the messages, maildir/bsd/) and of github.com/sisimai/go-sisimai (the expected
results: the `publiclist` tables of fact/*_test.go). Only their data is read;
nothing of sisimai is built or run.

    cargo build
    python3 scripts/bounce_heldout.py target/debug/herald SET_OF_EMAILS_DIR GO_SISIMAI_DIR [--verbose]

A row counts for "recipients" when Herald reports at least `index` recipients
for the file (the tables hold no addresses), and for "hard/soft" when Herald's
index-th recipient has the expected kind (`delayed` agrees with soft), as in
tests/bounce_corpus.rs. The held-out families are also split in two halves by
a hash of the family name, so that rules can be written from one half while
the other stays unread.
"""
import collections, hashlib, json, os, re, subprocess, sys

herald, emails_dir, facts_dir = sys.argv[1], sys.argv[2], sys.argv[3]
verbose = '--verbose' in sys.argv
here = os.path.dirname(os.path.abspath(__file__))
in_repo = set(os.listdir(os.path.join(here, '..', 'tests', 'data', 'bounces', 'eml')))
maildir = os.path.join(emails_dir, 'maildir', 'bsd')
fact = os.path.join(facts_dir, 'fact')

row_re = re.compile(r'\{"([^"]+)",\s*(\d+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*(true|false)')
rows = []
for name in sorted(os.listdir(fact)):
    m = re.match(r'\d+-(.+)_test\.go$', name)
    if not m or m.group(1) in ('rise', 'lhost-code'):
        continue
    family = m.group(1)
    public = open(os.path.join(fact, name), encoding='utf-8').read().split('secretlist')[0]
    for label, index, status, reply, reason, hard in row_re.findall(public):
        eml = f'{family}-{label}.eml'
        if os.path.exists(os.path.join(maildir, eml)):
            kind = 'n/a' if reason in ('feedback', 'vacation', 'delivered', 'expanded') else \
                ('hard' if hard == 'true' else 'soft')
            rows.append(dict(file=eml, index=int(index), status=status, reason=reason, kind=kind, family=family))

files = sorted({r['file'] for r in rows})
out = subprocess.run([herald, 'bounce', 'parse', '--json'] + [os.path.join(maildir, f) for f in files],
                     capture_output=True, text=True)
got = collections.defaultdict(list)
for line in out.stdout.splitlines():
    j = json.loads(line)
    got[os.path.basename(j['file'])].append(j)


def rate(selection):
    recipients, hard_soft, wrong = [0, 0], [0, 0], []
    for r in selection:
        if r['reason'] in ('delivered', 'expanded'):
            continue
        mine = got[r['file']][r['index'] - 1] if len(got[r['file']]) >= r['index'] else None
        recipients[1] += 1
        recipients[0] += mine is not None
        if mine is None:
            wrong.append((r, None))
        if r['kind'] in ('hard', 'soft'):
            ok = mine is not None and (mine['kind'] == 'hard' if r['kind'] == 'hard' else mine['kind'] in ('soft', 'delayed'))
            hard_soft[1] += 1
            hard_soft[0] += ok
            if not ok and mine is not None:
                wrong.append((r, mine))
    return recipients, hard_soft, wrong


def pct(pair):
    return f'{pair[0]}/{pair[1]} = {100 * pair[0] / max(pair[1], 1):.2f}%'


def unread_half(family):
    return int(hashlib.sha256(family.encode()).hexdigest(), 16) % 2 == 0


held = [r for r in rows if r['file'] not in in_repo]
for title, selection in [('held-out (not in tests/data)', held),
                         ('  families read while writing rules', [r for r in held if not unread_half(r['family'])]),
                         ('  families left unread', [r for r in held if unread_half(r['family'])]),
                         ('in tests/data (by position, for comparison)', [r for r in rows if r['file'] in in_repo])]:
    recipients, hard_soft, wrong = rate(selection)
    print(f'{title}: recipients {pct(recipients)}   hard/soft {pct(hard_soft)}')
    if verbose and title.startswith('  families read'):
        for r, mine in wrong:
            print(f"    {r['file']}#{r['index']} expected {r['kind']} {r['status']} ({r['reason']})")
            if mine:
                print(f"      got {mine['kind']} {mine['status']} {mine['reply_code']} :: {mine['reason'][:160]}")
