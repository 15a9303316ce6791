#!/usr/bin/env bash
# Runs each fuzz target for a bounded time, one after the other:
#   fuzz/run.sh [SECONDS-PER-TARGET] [TARGET...]   (default 300 s, all three)
# Built without a sanitizer (`--sanitizer none`): Herald and its
# dependencies are safe Rust apart from vetted crates, and the build is
# minutes instead of ~18 and runs several times faster; panics, overflows
# (overflow checks are on, see Cargo.toml), hangs (-timeout) and memory
# blow-ups (-rss_limit_mb) are still caught. Crashing inputs land in
# fuzz/artifacts/TARGET/; keep each as tests/data/fuzz/TARGET/crash-NAME
# once fixed (tests/fuzz_regressions.rs replays them).
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-300}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(template_render json_body bounce_parse)
for t in "${targets[@]}"; do
  extra=(../tests/data/fuzz/"$t")
  dict=()
  case "$t" in
    bounce_parse) extra+=(../tests/data/bounces/eml) ;;
    template_render) dict=(-dict=dict/template.dict) ;;
    json_body) dict=(-dict=dict/json.dict) ;;
  esac
  mkdir -p "corpus/$t"
  echo "=== $t: ${secs} s"
  RUSTC_BOOTSTRAP=1 cargo fuzz run -O --sanitizer none "$t" "corpus/$t" "${extra[@]}" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}"
done
