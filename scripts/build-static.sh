#!/usr/bin/env bash
# Builds Herald as one statically linked x86_64 Linux binary, and the
# container build context beside it (target/container/: the binary, the CA
# certificates, passwd/group, an empty /data).
#
#   scripts/build-static.sh            # release build
#   PROFILE=dev scripts/build-static.sh  # unoptimised, for a quick try
#
# Why not in .cargo/config.toml: cargo applies [target.<triple>] rustflags to
# every crate when --target is not given, so on an x86_64 machine a plain
# `cargo build` would become static too, and proc-macro crates cannot be
# built with +crt-static. Passing --target keeps the flag off build scripts
# and proc macros, which run on the build machine.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu
profile="${PROFILE:-release}"
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --locked --profile "$profile" --target "$target" --bin herald
bin="target/$target/$dir/herald"
# A static binary's ldd line is "not a dynamic executable" or "statically
# linked" depending on the ldd; `file` says it either way.
if ldd "$bin" 2>&1 | grep -q '=>'; then
  echo "error: $bin links shared libraries:" >&2
  ldd "$bin" >&2
  exit 1
fi
rm -rf target/container
mkdir -p target/container/data
cp "$bin" target/container/herald
# Debian's bundle (package ca-certificates); SSL_CERT_FILE overrides it at
# run time, email.tls_ca_file adds to it.
cp /etc/ssl/certs/ca-certificates.crt target/container/ca-certificates.crt
printf 'root:x:0:0:root:/:/sbin/nologin\nherald:x:65532:65532:herald:/data:/sbin/nologin\n' >target/container/passwd
printf 'root:x:0:\nherald:x:65532:\n' >target/container/group
echo "$bin: $("$bin" --version), $(stat -c %s "$bin") bytes"
