#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# slate-catalog as built: keygen/sign/verify round trip, exit codes, every refusal verify can make
# on its own, secret key file permissions, and a key and signature made by OpenSSL (an Ed25519
# implementation independent of libsodium) verified by slate-catalog. Needs neither libvirt nor
# QEMU. Run through tests/integration/run-one, which sources lib.sh (top_builddir, test_tmpdir,
# fail, skip, log).
# shellcheck disable=SC2154
set -euo pipefail

sc=$top_builddir/slate-catalog
[ -x "$sc" ] || fail "$sc is not built"
command -v openssl >/dev/null || skip "openssl not found (apt-get install openssl)"
command -v python3 >/dev/null || skip "python3 not found (apt-get install python3)"

work=$test_tmpdir/catalog
mkdir -p "$work"
cd "$work"
umask 022

# expect STATUS STDERR-PATTERN CMD...: run CMD; its exit status must be STATUS and its standard
# error must match the pattern (when not empty). Standard output is left in ./out.
expect() {
    local want=$1 pattern=$2 rc=0
    shift 2
    "$@" >out 2>err || rc=$?
    [ "$rc" = "$want" ] || fail "$*: exit $rc, want $want; stderr: $(cat err)"
    if [ -n "$pattern" ]; then
        grep -q -- "$pattern" err || fail "$*: stderr does not match '$pattern': $(cat err)"
    fi
}

write_catalog() { # write_catalog FILE VERSION [EXPIRES [SIGNED_AT]]
    cat >"$1" <<EOF
{
  "format": "slate-catalog",
  "formatVersion": 1,
  "channel": "stable",
  "version": $2,
  "signedAt": "${4:-2026-01-01T00:00:00Z}",
  "expires": "${3:-2099-01-01T00:00:00Z}",
  "images": [
    {
      "id": "test-image",
      "version": 1,
      "description": "integration test image",
      "disk": {"url": "test-image.img", "size": 4096, "uncompressedSize": 4096,
               "sha256": "ad7facb2586fc6e966c004d7d1d16b024f5805ff7cb47c7a85dabd8b48892ca7",
               "compression": "none", "format": "raw"},
      "boot": {"type": "firmware"},
      "postinstall": [
        {"uuid": "6f0e5c8a-2b1d-4e3f-a5b6-c7d8e9f0a1b2", "seq": 1,
         "description": "say hello", "command": "echo hello"}
      ]
    }
  ]
}
EOF
}

# Usage errors: exit 2.
expect 0 "" "$sc" --version
grep -q "^slate-catalog [0-9]" out || fail "--version: $(cat out)"
expect 0 "" "$sc" --help
grep -q "keygen SECRET_KEY PUBLIC_KEY" out || fail "--help: $(cat out)"
expect 0 "" "$sc" verify --help
expect 2 "" "$sc"
expect 2 "unknown command 'frobnicate'" "$sc" frobnicate
expect 2 "unknown option '--frob'" "$sc" --frob
expect 2 "slate-catalog: keygen: want SECRET_KEY PUBLIC_KEY" "$sc" keygen only-one
expect 2 "slate-catalog: sign: --key SECRET_KEY is required" "$sc" sign c.json
expect 2 "unknown option '--bogus'" "$sc" sign --bogus --key k c.json
expect 2 "needs an argument" "$sc" sign c.json --key
expect 2 "slate-catalog: verify: want CATALOG \[SIG\]" "$sc" verify
expect 2 "--now" "$sc" verify --now tomorrow c.json
expect 2 "--channel" "$sc" verify --channel Stable c.json

# keygen: 0600 secret, 0644 public, never overwrites.
expect 0 "" "$sc" keygen a.secret a.pub --comment "integration key"
[ "$(stat -c %a a.secret)" = 600 ] || fail "secret key mode $(stat -c %a a.secret)"
[ "$(stat -c %a a.pub)" = 644 ] || fail "public key mode $(stat -c %a a.pub)"
grep -q "^slate-ed25519 [A-Za-z0-9+/]\{43\}= integration key$" a.pub || fail "a.pub: $(cat a.pub)"
grep -q "^slate-ed25519-secret " a.secret || fail "a.secret is not a secret key file"
key_a=$(sed -n 's/^key ID //p' out)
[ ${#key_a} = 16 ] || fail "keygen printed no key ID: $(cat out)"
before=$(sha256sum a.secret)
expect 1 "a.secret: File exists" "$sc" keygen a.secret other.pub
[ "$before" = "$(sha256sum a.secret)" ] || fail "keygen changed an existing secret key"
[ ! -e other.pub ] || fail "keygen left other.pub behind"
expect 1 "a.pub: File exists" "$sc" keygen new.secret a.pub
[ ! -e new.secret ] || fail "keygen left new.secret behind"
expect 0 "" "$sc" keygen b.secret b.pub

# sign and verify.
write_catalog c.json 5
expect 0 "" "$sc" sign --key a.secret c.json
grep -q "^slate-catalog-sig-v1 $key_a [A-Za-z0-9+/]\{86\}==$" c.json.sig || fail "c.json.sig: $(cat c.json.sig)"
expect 0 "" "$sc" verify --trusted a.pub c.json
grep -q "good signature by trusted key $key_a (integration key)" out || fail "verify: $(cat out)"
expect 0 "" "$sc" verify --trusted a.pub --channel stable c.json c.json.sig
mkdir trusted
cp a.pub b.pub trusted/
echo "not a key" >trusted/README
expect 0 "" "$sc" verify --trusted trusted c.json
expect 0 "" "$sc" verify --trusted b.pub --trusted a.pub --json c.json
python3 - out "$key_a" <<'EOF' || fail "verify --json: $(cat out)"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["valid"] is True and d["keyId"] == sys.argv[2] and d["version"] == 5, d
assert d["channel"] == "stable" and d["images"] == [{"id": "test-image", "version": 1}], d
assert d["expires"] == "2099-01-01T00:00:00Z" and d["keyComment"] == "integration key", d
EOF
expect 0 "" "$sc" sign --key b.secret --channel stable c.json
expect 0 "" "$sc" verify --trusted b.pub c.json

# Refusals: exit 1 and the reason.
expect 0 "" "$sc" sign --key a.secret c.json
cp c.json unsigned.json
expect 1 "slate-catalog: verify: catalog is not signed" "$sc" verify --trusted a.pub unsigned.json
: >empty.sig
expect 1 "not signed" "$sc" verify --trusted a.pub c.json empty.sig
echo "hello" >junk.sig
expect 1 "malformed signature" "$sc" verify --trusted a.pub c.json junk.sig
head -c 2000 /dev/zero | tr '\0' A >big.sig
expect 1 "malformed signature: larger than" "$sc" verify --trusted a.pub c.json big.sig
expect 1 "signed by key $key_a, which is not trusted" "$sc" verify --trusted b.pub c.json
expect 1 "bad signature" "$sc" verify --trusted a.pub --channel beta c.json
sed 's/"version": 5/"version": 6/' c.json >tampered.json
cp c.json.sig tampered.json.sig
expect 1 "bad signature" "$sc" verify --trusted a.pub tampered.json
printf ' ' >>tampered.json # even one byte of whitespace
expect 1 "bad signature" "$sc" verify --trusted a.pub tampered.json
expect 1 "expired at 2099-01-01T00:00:00Z" "$sc" verify --trusted a.pub --now 2099-01-01T00:00:00Z c.json
expect 0 "" "$sc" verify --trusted a.pub --now 2098-12-31T23:59:59Z c.json
truncate -s 5M huge.json
cp c.json.sig huge.json.sig
expect 1 "larger than the 4194304 bytes allowed" "$sc" verify --trusted a.pub huge.json
expect 1 "" "$sc" verify --trusted a.pub --json c.json junk.sig
python3 -c 'import json,sys; d=json.load(open("out")); assert d["valid"] is False and d["error"]["code"]=="signature_malformed", d' ||
    fail "verify --json on a refusal: $(cat out)"
expect 1 "nonexistent" "$sc" verify --trusted nonexistent c.json

# sign refuses what verify would refuse, and insecure secret keys.
expect 1 "catalog is for channel \"stable\", not \"beta\"" "$sc" sign --key a.secret --channel beta c.json
write_catalog old.json 1 2020-01-01T00:00:00Z 2019-01-01T00:00:00Z
expect 1 "expired at 2020-01-01T00:00:00Z; refusing to sign it" "$sc" sign --key a.secret old.json
sed 's/"format": "raw"/"format": "vmdk"/' c.json >bad.json
expect 1 "images\[0\].disk.format: unknown value \"vmdk\"" "$sc" sign --key a.secret bad.json
[ ! -e bad.json.sig ] || fail "sign wrote a signature for a malformed catalog"
for mode in 0640 0604 0660 0601; do
    chmod "$mode" a.secret
    expect 1 "group or others may access it" "$sc" sign --key a.secret c.json
done
chmod 0600 a.secret
install -m 0600 b.pub not-secret
expect 1 "not-secret: not a secret key file" "$sc" sign --key not-secret c.json

# An Ed25519 key and signature made by OpenSSL alone verify with slate-catalog, in PEM and as
# the one-line form, and OpenSSL's signature over the bare catalog (no domain prefix) does not.
openssl genpkey -algorithm ed25519 -out o.pem 2>/dev/null || skip "this OpenSSL cannot make Ed25519 keys"
openssl pkey -in o.pem -pubout -out o.pub
key_o=$(openssl pkey -pubin -in o.pub -outform DER | tail -c 32 | openssl dgst -sha256 -binary |
    head -c 8 | od -An -tx1 | tr -d ' \n')
printf 'slate-catalog-v1\0channel=stable\0' >message
cat c.json >>message
openssl pkeyutl -sign -rawin -inkey o.pem -in message -out o.sig.bin
[ "$(stat -c %s o.sig.bin)" = 64 ] || fail "openssl made a $(stat -c %s o.sig.bin)-byte signature"
printf 'slate-catalog-sig-v1 %s %s\n' "$key_o" "$(base64 -w0 o.sig.bin)" >o.sig
expect 0 "" "$sc" verify --trusted o.pub c.json o.sig
grep -q "good signature by trusted key $key_o" out || fail "openssl signature: $(cat out)"
printf 'slate-ed25519 %s openssl\n' "$(openssl pkey -pubin -in o.pub -outform DER | tail -c 32 | base64 -w0)" >o-line.pub
expect 0 "" "$sc" verify --trusted o-line.pub c.json o.sig
cp o.pub trusted/o.pub
expect 0 "" "$sc" verify --trusted trusted c.json o.sig
openssl pkeyutl -sign -rawin -inkey o.pem -in c.json -out bare.sig.bin
printf 'slate-catalog-sig-v1 %s %s\n' "$key_o" "$(base64 -w0 bare.sig.bin)" >bare.sig
expect 1 "bad signature" "$sc" verify --trusted o.pub c.json bare.sig
# Signed by OpenSSL for the beta channel: bad for stable; for beta, the catalog names another
# channel.
printf 'slate-catalog-v1\0channel=beta\0' >message-beta
cat c.json >>message-beta
openssl pkeyutl -sign -rawin -inkey o.pem -in message-beta -out beta.sig.bin
printf 'slate-catalog-sig-v1 %s %s\n' "$key_o" "$(base64 -w0 beta.sig.bin)" >beta.sig
expect 1 "bad signature" "$sc" verify --trusted o.pub c.json beta.sig
expect 1 "catalog is for channel \"stable\", not \"beta\"" "$sc" verify --trusted o.pub --channel beta c.json beta.sig

# And slate-catalog's own signature checks out with OpenSSL.
expect 0 "" "$sc" sign --key a.secret c.json
awk '{print $3}' c.json.sig | base64 -d >ours.sig.bin
# a.pub's raw key behind the fixed DER header of an Ed25519 SubjectPublicKeyInfo.
python3 -c 'import base64, sys; sys.stdout.buffer.write(bytes.fromhex("302a300506032b6570032100") + base64.b64decode(sys.argv[1]))' \
    "$(awk '{print $2}' a.pub)" >a.der
openssl pkey -pubin -inform DER -in a.der -out a.pem
openssl pkeyutl -verify -rawin -pubin -inkey a.pem -in message -sigfile ours.sig.bin >/dev/null ||
    fail "OpenSSL does not verify slate-catalog's signature"

# pack: an ordinary zstd file (zstd -d gives the image back) in 4 MiB frames, the catalog's
# figures right (sha256sum, stat), OUTPUT whole or absent, refusals.
if command -v zstd >/dev/null; then
    truncate -s 10M raw.img
    head -c 300000 /dev/urandom | dd of=raw.img bs=1 seek=$((5 << 20)) conv=notrunc status=none
    expect 0 "" "$sc" pack --level 3 raw.img raw.zst
    grep -q "^sha256 $(sha256sum raw.zst | cut -d' ' -f1)\$" out || fail "pack: $(cat out)"
    grep -q "^size $(stat -c %s raw.zst)\$" out || fail "pack: $(cat out)"
    grep -q "^uncompressedSize $((10 << 20))\$" out || fail "pack: $(cat out)"
    zstd -q -d -c raw.zst | cmp -s - raw.img || fail "pack: zstd -d does not give the image back"
    # Three frames (4 + 4 + 2 MiB), each with its content size: zstd -l counts them.
    zstd -l raw.zst 2>&1 | awk 'NR == 2 { exit !($1 == 3) }' || fail "pack: not 3 frames: $(zstd -l raw.zst 2>&1)"
    expect 0 "" "$sc" pack --json raw.img raw2.zst
    python3 -c 'import json, sys; j = json.load(open("out")); assert j["compression"] == "zstd" and j["uncompressedSize"] == 10 << 20 and len(j["sha256"]) == 64, j' ||
        fail "pack --json: $(cat out)"
    expect 2 "level takes 1..22" "$sc" pack --level 23 raw.img x.zst
    expect 2 "want RAW_IMAGE OUTPUT" "$sc" pack raw.img
    expect 1 "missing.img: No such file" "$sc" pack missing.img x.zst
    mkdir ro-dir && chmod 0555 ro-dir
    if ! touch ro-dir/probe 2>/dev/null; then
        expect 1 "ro-dir/x.zst" "$sc" pack raw.img ro-dir/x.zst
    fi
    rm -f ro-dir/probe
    # A failed pack leaves nothing: the input is a directory, read fails after the temp file
    # was made.
    mkdir indir
    expect 1 "" "$sc" pack indir out.zst
    [ ! -e out.zst ] && ! ls out.zst.tmp-* >/dev/null 2>&1 || fail "pack left a file behind"
    log "pack: zstd -d round trip, 3 frames, catalog figures, --json, refusals, nothing left on failure"
fi
log "slate-catalog: all checks passed"
