#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# AWS SigV4 re-signing from inside a test guest (doc/sigv4.md), through a private slated. The
# workspace has an AWS secret (real key id, secret and session token, made up for this run)
# bound to amazonaws.com and written to the guest's ~/.aws/credentials; the guest holds only the
# placeholders. tests/integration/s3server.py (HTTPS on 127.0.0.1) verifies SigV4 with the REAL
# key only; slated's proxy reaches it as s3.amazonaws.com through its test-only settings (an
# upstream name pointed at 127.0.0.1, and that address allowed in the workspace's policy).
#
# Inside the guest, curl 7.88 signs each request itself (--aws-sigv4) with the key id and secret
# it reads from ~/.aws/credentials, and sends it through the guest-local proxy (127.0.0.1:3128,
# over the guest channel to slated's proxy, TLS intercepted with the egress CA):
#   * create a bucket, put an object (1 MiB, the body's hash signed), list the bucket, get the
#     object back (same bytes), get it with UNSIGNED-PAYLOAD: all accepted by the server, which
#     logged each as verified with the real key;
#   * the headers the guest signed, replayed straight to the server (no proxy, no re-signing),
#     are refused (InvalidAccessKeyId): every success above needed re-signing;
#   * a presigned GET made on the host with the placeholder credentials (botocore) works from the
#     guest through the proxy and is refused straight at the server;
#   * no real value anywhere in the guest: its environment, home, /tmp, /run/slate, curl's
#     traces, and a dump of its memory (each scan first shown to find the placeholders);
#   * slate trace records the re-signatures (service s3, masked key id) and no real value.
# Run through tests/integration/run-one, which sources lib.sh.
# shellcheck disable=SC2154,SC2016,SC2088 # lib.sh's variables; guest-side paths
set -euo pipefail

ensure_libvirt
ensure_test_image
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || skip "python3 not found"
for cmd in openssl curl; do
    command -v $cmd >/dev/null || skip "$cmd not found"
done

s3server=$top_srcdir/tests/integration/s3server.py
ws=sv$$
server_pid=
on_exit destroy_domains "slate-$ws"
on_exit stop_bg server_pid
on_exit stop_slated

# A test CA and the server's certificate (for the proxy's upstream check, and for the replays
# straight to 127.0.0.1).
make_test_certs "$work" "slate sigv4-guest test CA" s3.amazonaws.com \
    DNS:s3.amazonaws.com,IP:127.0.0.1

# Real credentials made up for this run: only the server and slated see them.
rnd() { "$py" -c 'import secrets, sys; print("".join(secrets.choice(sys.argv[1]) for _ in range(int(sys.argv[2]))))' "$@"; }
alnum=ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789
REAL_ID=AKIA$(rnd ABCDEFGHIJKLMNOPQRSTUVWXYZ234567 16)
REAL_SECRET=$(rnd "$alnum/+" 40)
REAL_TOKEN=IQoJb3JpZ2luX2VjE$(rnd "$alnum/+" 60)==
# no_real_value FILE WHAT: one pass over FILE for every real value at once.
no_real_value() { lacks_bytes "$1" "$2" "$REAL_ID" "$REAL_SECRET" "$REAL_TOKEN"; }

S3SERVER_SECRET=$REAL_SECRET S3SERVER_TOKEN=$REAL_TOKEN "$py" "$s3server" serve \
    --cert "$work/srv.pem" --key "$work/srv.key" --port-file "$work/port" \
    --log "$work/server.log" --access-key-id "$REAL_ID" >"$work/server.out" 2>&1 &
server_pid=$!
wait_file "$work/port" "$server_pid" "$work/server.out"
port=$(cat "$work/port")

start_daemon() {
    start_slated SLATE_PROXY_TEST_CA_FILE="$work/ca.pem" \
        SLATE_PROXY_TEST_CONNECT_TO="s3.amazonaws.com:443:127.0.0.1:$port"
}
# gx: a command in the guest, with a bound on the wall clock.
gx() { timeout -k 5 120 "$slate" --socket "$work/run/slated.sock" exec "$ws" -- "$@"; }
gxi() { timeout -k 5 120 "$slate" --socket "$work/run/slated.sock" exec -i "$ws" -- "$@"; }

mnt=$(make_loop_fs btrfs sigv4guest 3G)
state=$mnt/state
start_daemon
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 256M >/dev/null
printf '%s %s %s\n' "$REAL_ID" "$REAL_SECRET" "$REAL_TOKEN" |
    s secret set $ws AWS --kind aws --host amazonaws.com --file '~/.aws/credentials' --json \
        >"$work/set.json" || fail "secret set: $(cat "$work/set.json")"
no_real_value "$work/set.json" "secret set's output"
"$py" -c 'import json,sys; [print(v) for v in json.load(sys.stdin)["placeholders"].values()]' \
    <"$work/set.json" >"$work/ph.txt"
[ "$(wc -l <"$work/ph.txt")" = 3 ] || fail "expected three AWS placeholders: $(cat "$work/set.json")"
PH_ID=$(grep '^AKIA' "$work/ph.txt" | head -1)
[ -n "$PH_ID" ] || fail "no AKIA-shaped placeholder key id: $(cat "$work/ph.txt")"
# The test server listens on 127.0.0.1: loopback is refused unless allowed explicitly.
s egress $ws allow 127.0.0.1 >/dev/null
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"
gx sh -c 'command -v curl' >/dev/null 2>&1 || skip "no curl in the test image"
gx curl --version | head -1 | grep -q '^curl ' || fail "curl in the guest does not run"

# The egress CA for the guest's curl (the production image's provisioning trusts it system-wide),
# the object to store, and the guest's client: curl signing with what ~/.aws/credentials holds.
gxi sh -c 'cat >/tmp/egress-ca.crt' <"$state/install/egress-ca.crt"
head -c $((1024 * 1024 + 7)) /dev/urandom >"$work/obj.bin"
gxi sh -c 'cat >/tmp/obj.bin' <"$work/obj.bin"
cat >"$work/s3.sh" <<'EOF'
# s3.sh METHOD PATH PAYLOAD-HASH [CURL-ARGS...]: one S3 request, signed by curl with the
# credentials in ~/.aws/credentials, through the guest-local proxy. Prints the HTTP status;
# the body goes to /tmp/body, curl's trace of the request headers to /tmp/trace.
cred=$HOME/.aws/credentials
get() { sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$cred" | head -n 1; }
id=$(get aws_access_key_id)
secret=$(get aws_secret_access_key)
token=$(get aws_session_token)
[ -n "$id" ] && [ -n "$secret" ] && [ -n "$token" ] || { echo "no credentials in $cred" >&2; exit 2; }
m=$1 path=$2 hash=$3
shift 3
curl -sS -v --max-time 60 --proxy http://127.0.0.1:3128 --cacert /tmp/egress-ca.crt \
    --aws-sigv4 aws:amz:us-east-1:s3 --user "$id:$secret" -H "x-amz-security-token: $token" \
    -H "x-amz-content-sha256: $hash" -X "$m" -o /tmp/body -w '%{http_code}\n' "$@" \
    "https://s3.amazonaws.com$path" 2>/tmp/trace
EOF
gxi sh -c 'cat >/tmp/s3.sh' <"$work/s3.sh"
E=$(printf '' | sha256sum | cut -d' ' -f1)
H=$(sha256sum "$work/obj.bin" | cut -d' ' -f1)
gs3() { # what: the request's name; the rest: s3.sh's arguments. Expects 200.
    local what=$1 st
    shift
    st=$(gx sh /tmp/s3.sh "$@" 2>"$work/err") || true
    gx cat /tmp/trace >"$work/trace.$what" 2>/dev/null || true
    [ "$st" = 200 ] || fail "$what from the guest: '$st' $(cat "$work/err") $(gx cat /tmp/body 2>/dev/null | head -c 400) $(tail -3 "$work/server.log")"
}
log "s3server.py on 127.0.0.1:$port; the guest's key id $PH_ID"

# ---- list, put, get, signed in the guest with the placeholders, re-signed by slated ----
gs3 mb PUT /bkt "$E"
gs3 put PUT /bkt/dir/obj.bin "$H" --data-binary @/tmp/obj.bin
gs3 ls GET '/bkt?list-type=2' "$E"
gx cat /tmp/body | grep -q '<Key>dir/obj.bin</Key><LastModified>' || fail "ls: $(gx cat /tmp/body)"
grep -q "<Size>$((1024 * 1024 + 7))</Size>" <(gx cat /tmp/body) || fail "ls: wrong size"
gs3 get GET /bkt/dir/obj.bin "$E"
[ "$(gx sha256sum /tmp/body | cut -d' ' -f1)" = "$H" ] || fail "the object came back different"
gs3 get-unsigned GET /bkt/dir/obj.bin UNSIGNED-PAYLOAD
[ "$(gx sha256sum /tmp/body | cut -d' ' -f1)" = "$H" ] || fail "the object came back different"
# The server verified each with the real key (the only one it knows), over the payload signed.
for want in '"method": "PUT", "path": "/bkt", "status": 200, "auth": "header", "payload": "sha256"' \
    '"method": "PUT", "path": "/bkt/dir/obj.bin", "status": 200, "auth": "header", "payload": "sha256"' \
    '"method": "GET", "path": "/bkt", "status": 200, "auth": "header"' \
    '"method": "GET", "path": "/bkt/dir/obj.bin", "status": 200, "auth": "header", "payload": "UNSIGNED-PAYLOAD"'; do
    grep -qF "$want" "$work/server.log" || fail "the server did not log $want: $(cat "$work/server.log")"
done
grep -q "Credential=$PH_ID/" "$work/trace.get" || fail "the guest did not sign with the placeholder key id"
log "from the guest, signed with the placeholders: mb, put (1 MiB), ls, get (twice): ok"

# ---- what the guest signed, sent straight to the server without re-signing: refused ----
# replay TRACE BODY-FILE: the request headers curl sent in the guest, to 127.0.0.1 directly.
replay() {
    local t=$1 line m path
    local -a hs=()
    line=$(grep -m1 '^> [A-Z]* /' "$t" | tr -d '\r')
    m=$(echo "$line" | cut -d' ' -f2)
    path=$(echo "$line" | cut -d' ' -f3)
    while IFS= read -r line; do
        line=${line#> }
        case "${line,,}" in
        host:* | authorization:* | x-amz-*) hs+=(-H "$line") ;;
        esac
    done < <(grep '^> [A-Za-z0-9-]*: ' "$t" | tr -d '\r')
    [ ${#hs[@]} -ge 5 ] || fail "the guest's trace lacks its signed headers: $(cat "$t")"
    curl -sS --max-time 20 --cacert "$work/ca.pem" -X "$m" "${hs[@]}" -o "$work/replay.body" \
        -w '%{http_code}' "${@:2}" "https://127.0.0.1:$port$path" || true
}
st=$(replay "$work/trace.get")
[ "$st" = 403 ] || fail "the guest's own GET straight to the server: $st $(cat "$work/replay.body")"
grep -q InvalidAccessKeyId "$work/replay.body" || fail "replayed GET: $(cat "$work/replay.body")"
st=$(replay "$work/trace.put" --data-binary @"$work/obj.bin")
[ "$st" = 403 ] || fail "the guest's own PUT straight to the server: $st $(cat "$work/replay.body")"
grep -q InvalidAccessKeyId "$work/replay.body" || fail "replayed PUT: $(cat "$work/replay.body")"
log "the guest's signatures straight to the server: refused (InvalidAccessKeyId)"

# ---- a presigned GET made on the host with the placeholders, fetched by the guest ----
if "$py" -c 'import botocore' 2>/dev/null; then
    PH_SECRET=$(gx sh -c 'sed -n "s/^[[:space:]]*aws_secret_access_key[[:space:]]*=[[:space:]]*//p" ~/.aws/credentials')
    PH_TOKEN=$(gx sh -c 'sed -n "s/^[[:space:]]*aws_session_token[[:space:]]*=[[:space:]]*//p" ~/.aws/credentials')
    grep -qxF -- "$PH_SECRET" "$work/ph.txt" || fail "the guest's secret is not the placeholder"
    grep -qxF -- "$PH_TOKEN" "$work/ph.txt" || fail "the guest's token is not the placeholder"
    url=$(env AWS_ACCESS_KEY_ID="$PH_ID" AWS_SECRET_ACCESS_KEY="$PH_SECRET" \
        AWS_SESSION_TOKEN="$PH_TOKEN" "$py" "$s3server" presign --url --host s3.amazonaws.com \
        /bkt/dir/obj.bin) || fail "presign failed"
    case "$url" in *"X-Amz-Credential=$PH_ID"*) ;; *) fail "not the placeholder's URL: $url" ;; esac
    st=$(gx curl -sS --max-time 60 --proxy http://127.0.0.1:3128 --cacert /tmp/egress-ca.crt \
        -o /tmp/presigned.bin -w '%{http_code}' "$url" 2>"$work/err") || true
    [ "$st" = 200 ] || fail "presigned GET from the guest: '$st' $(cat "$work/err")"
    [ "$(gx sha256sum /tmp/presigned.bin | cut -d' ' -f1)" = "$H" ] ||
        fail "the presigned GET returned other bytes"
    grep -qF '"method": "GET", "path": "/bkt/dir/obj.bin", "status": 200, "auth": "query"' \
        "$work/server.log" || fail "the server did not verify the presigned GET"
    st=$(curl -s --max-time 20 --cacert "$work/ca.pem" -o /dev/null -w '%{http_code}' \
        -H 'Host: s3.amazonaws.com' "${url/https:\/\/s3.amazonaws.com/https://127.0.0.1:$port}" || true)
    [ "$st" = 403 ] || fail "the placeholder's presigned URL straight to the server: $st"
    log "presigned GET (placeholders, made on the host) from the guest: ok; straight: 403"
else
    log "botocore not importable: the presigned GET is not tested (sigv4-proxy.sh covers it)"
fi

# ---- no real value in the guest ----
# (The object's random bytes are left out: they are this test's own, and large.)
gx sh -c 'env; for d in /home /root /tmp /run/slate /etc; do
    find "$d" -xdev -type f -size -256k ! -name "*.bin" ! -name body 2>/dev/null; done |
    while read -r f; do echo "== $f"; cat "$f"; done' >"$work/guest.txt" 2>&1 || true
grep -qaF -- "$PH_ID" "$work/guest.txt" || fail "the guest scan does not even find the placeholder key id"
cat "$work"/trace.* >>"$work/guest.txt"
no_real_value "$work/guest.txt" "the guest's environment, files or curl traces"
virsh -q -c "$SLATE_TEST_URI" dump --memory-only "slate-$ws" "$work/mem.dump" >/dev/null ||
    fail "virsh dump failed"
holds_bytes "$work/mem.dump" "the memory dump" "$PH_ID"
no_real_value "$work/mem.dump" "the guest's memory"
rm -f "$work/mem.dump"
log "no real value in the guest's environment, files or memory"

# ---- the audit trail ----
s trace $ws --json >"$work/trace.json"
"$py" - "$work/trace.json" "$PH_ID" <<'EOF' || fail "the trace lacks the re-signatures"
import json, sys
d = json.load(open(sys.argv[1]))
evs = d["events"] if isinstance(d, dict) else d
sv = [e["sigv4"] for e in evs if isinstance(e, dict) and "sigv4" in e]
kinds = {(v["service"], v["auth"]) for v in sv}
print("# re-signatures in the trace: %d %s" % (len(sv), sorted(kinds)), file=sys.stderr)
ok = ("s3", "header") in kinds and all(
    v["key_id"].startswith("AKIA") and v["key_id"] != sys.argv[2] for v in sv)
sys.exit(0 if ok else 1)
EOF
no_real_value "$work/trace.json" "slate trace"
no_real_value "$work/slated.log" "slated's log"

s stop --force $ws >/dev/null
s rm --yes $ws >/dev/null
log "ok"
