#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Regenerates the OpenSSL-made fixtures of tests/unit/test-catalog.c: the public half of a new
# Ed25519 key made by OpenSSL (openssl.pub, PEM), catalog.json.sig signed with it by
# `openssl pkeyutl` over the domain-separated message (an implementation independent of
# libsodium), and a P-256 public key (ec.pub) that must be refused as not Ed25519. The secret key
# is thrown away. catalog.json itself is written by hand. Run it anywhere; it needs OpenSSL >= 3.
set -euo pipefail
cd "$(dirname "$0")"
channel=stable

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl genpkey -algorithm ed25519 -out "$tmp/openssl.key"
openssl pkey -in "$tmp/openssl.key" -pubout -out openssl.pub
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null |
    openssl pkey -pubout -out ec.pub

# What is signed: "slate-catalog-v1" NUL "channel=<name>" NUL, then the catalog's exact bytes.
msg=$tmp/message
printf 'slate-catalog-v1\0channel=%s\0' "$channel" >"$msg"
cat catalog.json >>"$msg"
openssl pkeyutl -sign -rawin -inkey "$tmp/openssl.key" -in "$msg" -out "$msg.sig"

# Key ID: the first 8 bytes of SHA-256 over the raw 32-byte public key, in hex. The raw key is
# the last 32 bytes of the DER SubjectPublicKeyInfo.
key_id=$(openssl pkey -pubin -in openssl.pub -outform DER | tail -c 32 |
    openssl dgst -sha256 -binary | head -c 8 | od -An -tx1 | tr -d ' \n')
printf 'slate-catalog-sig-v1 %s %s\n' "$key_id" "$(base64 -w0 "$msg.sig")" >catalog.json.sig
echo "key ID $key_id"
