#!/usr/bin/env python3
"""Is memory flat under steady load? Reads the JSON of a long
`herald bench --pipeline` run and prints the process's RSS at minutes 2, 10,
20 and 30 ("-" past the run's end) as a README table row, with the mean of
each five minutes from minute 2 on and the lowest and highest single
second; exits 1 if any five-minute mean is more than 10% above the first
(the goal of issue 27, item 17: flat, within 10%). The means, not single
seconds: the per-second RSS moves by a few MiB either way as the
allocator takes and returns memory (43.7-49.5 MiB over a flat run), which
is noise, not growth.

    cargo build --release
    createdb -h 127.0.0.1 -U postgres hrss     # a scratch database
    ./target/release/herald bench --pipeline --duration 1800 --connections 64 --json \
        --bench-database-url postgres://postgres@127.0.0.1:5432/hrss > rss.json
    python3 bench/pipeline_rss.py rss.json "2 shared cores"

Minute 2, not the start: the first minute warms the pools, the connections'
buffers and the caches, which is growth that stops.
"""

import json
import sys

FROM_SECONDS = 120
LIMIT = 1.10


def rss_at(per_second, seconds):
    """The RSS of the second nearest `seconds` into the load."""
    return min(per_second, key=lambda s: abs(s["at_seconds"] - seconds))["rss_mib"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    machine = sys.argv[2] if len(sys.argv) > 2 else f"{report['cores']} cores"
    per_second = report["per_second"]
    steady = [s["rss_mib"] for s in per_second if s["at_seconds"] >= FROM_SECONDS]
    if not steady:
        sys.exit(f"the run lasted {report['duration_seconds']:.0f} s: nothing from minute 2 on")
    last = per_second[-1]["at_seconds"]
    at = [f"{rss_at(per_second, m * 60):.1f}" if m * 60 <= last + 1 else "-" for m in (2, 10, 20, 30)]
    low, high = min(steady), max(steady)

    def mean(start):
        v = [s["rss_mib"] for s in per_second if start <= s["at_seconds"] < start + 300]
        return sum(v) / len(v)

    means = [mean(t) for t in range(FROM_SECONDS, int(last) - 299, 300)] or [mean(FROM_SECONDS)]
    command = (
        f"herald bench --pipeline --duration {report['duration_seconds']:.0f} "
        f"--connections {report['connections']} ({report['database']})"
    )
    print(
        "| command | machine | triggers/s | RSS MiB at 2 / 10 / 20 / 30 min "
        "| five-minute means from min 2 | lowest-highest second |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    print(
        f"| `{command}` | {machine} | {report['triggers_per_sec']:,.0f} | {' / '.join(at)} "
        f"| {', '.join(f'{m:.1f}' for m in means)} | {low:.1f}-{high:.1f} |"
    )
    if max(means) > means[0] * LIMIT:
        print(f"RSS grew by more than {(LIMIT - 1) * 100:.0f}% from minute 2 on", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
