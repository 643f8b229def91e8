# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# AWS SigV4 re-signing in the egress proxy, end to end on the host (doc/sigv4.md), no VM needed.
# tests/unit/proxy-listen runs the proxy with one AWS secret (real key id, secret and session
# token) bound to amazonaws.com; s3.amazonaws.com and unbound.test are pointed at
# tests/integration/s3server.py (HTTPS on 127.0.0.1, which verifies SigV4 with the REAL key only)
# through the proxy's test-only --connect-to. The AWS CLI holds only the PLACEHOLDER credentials:
#  1. straight to the server they are refused (so every success below needs re-signing);
#  2. through the proxy: mb, put (single and multipart), ls, get, presigned get, and signed
#     aws-chunked streaming puts (with and without a trailer) all succeed, the audit events say
#     what was re-signed (masked key id) and no real value appears in them; requests to other
#     services (sts, execute-api) signed over the body's hash (botocore's SigV4Auth, and curl's
#     --aws-sigv4), with a path the other services encode twice, are re-signed over the body
#     and verified by the server with those services' rules;
#  3. a malformed aws-chunked body is refused (400) and nothing reaches the server;
#  4. the placeholder key id towards an unbound host is a leak: 451, the compromise hook, nothing
#     forwarded;
#  5. the throughput of a signed streaming upload through the proxy against the same upload
#     straight to the server with the real key (logged; the target is >= 0.7x, doc/performance.md).

need_aws_cli
for cmd in openssl curl; do
    command -v $cmd >/dev/null || skip "$cmd not found"
done
need_proxy_listen
s3server=$top_srcdir/tests/integration/s3server.py
d=$test_tmpdir

# A test CA, and the server's certificate for every name it is reached by.
make_test_certs "$d" slate-sigv4-proxy-test-ca s3.amazonaws.com \
    DNS:s3.amazonaws.com,DNS:unbound.test,DNS:abc123.execute-api.us-east-1.amazonaws.com,IP:127.0.0.1

# Real credentials made up for this run: only the server and the proxy see them.
rnd() { "$py" -c 'import secrets, sys; print("".join(secrets.choice(sys.argv[1]) for _ in range(int(sys.argv[2]))))' "$@"; }
alnum=ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789
REAL_ID=AKIA$(rnd ABCDEFGHIJKLMNOPQRSTUVWXYZ234567 16)
REAL_SECRET=$(rnd "$alnum/+" 40)
REAL_TOKEN=IQoJb3JpZ2luX2VjE$(rnd "$alnum/+" 60)==

pids=()
on_exit stop_bg pids
S3SERVER_SECRET=$REAL_SECRET S3SERVER_TOKEN=$REAL_TOKEN "$py" "$s3server" serve \
    --cert "$d/srv.pem" --key "$d/srv.key" --port-file "$d/port" --log "$d/server.log" \
    --access-key-id "$REAL_ID" >"$d/server.out" 2>&1 &
pids+=($!)
wait_file "$d/port" "$!" "$d/server.out"
port=$(cat "$d/port")

cat >"$d/secrets.json" <<EOF
[{"key": "AWS", "kind": "aws", "hosts": ["amazonaws.com"],
  "value": "$REAL_ID $REAL_SECRET $REAL_TOKEN"}]
EOF
echo '{"default": "allow-all", "rules": [{"action": "allow", "host": "127.0.0.1"}]}' >"$d/policy.json"
start_proxy_listen "$d" \
    "s3.amazonaws.com:443:127.0.0.1:$port,unbound.test:443:127.0.0.1:$port,abc123.execute-api.us-east-1.amazonaws.com:443:127.0.0.1:$port"
egress_ca=$d/install/egress-ca.crt
ph() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["AWS"][int(sys.argv[2])])' "$d/ph.json" "$1"; }
PH_ID=$(ph 0)
PH_SECRET=$(ph 1)
PH_TOKEN=$(ph 2)
if [ "$PH_ID" = "$REAL_ID" ] || [ "$PH_SECRET" = "$REAL_SECRET" ] || [ "$PH_TOKEN" = "$REAL_TOKEN" ]; then
    fail "the placeholders are the real values"
fi
log "s3server.py on 127.0.0.1:$port, proxy on 127.0.0.1:$px, placeholder key id $PH_ID"

printf '[default]\ns3 =\n  addressing_style = path\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n' \
    >"$d/aws-config"
# guest_aws [ENV=V...] -- ARGS: the AWS CLI with the placeholder credentials, nothing else
# configured (no proxy unless the caller sets one).
guest_aws() {
    local envs=()
    while [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    shift
    env -i PATH="$PATH" HOME="$d" LANG=C.UTF-8 AWS_CONFIG_FILE="$d/aws-config" \
        AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_DEFAULT_REGION=us-east-1 \
        AWS_EC2_METADATA_DISABLED=true AWS_ACCESS_KEY_ID="$PH_ID" \
        AWS_SECRET_ACCESS_KEY="$PH_SECRET" AWS_SESSION_TOKEN="$PH_TOKEN" "${envs[@]}" \
        "$aws" --no-cli-pager "$@"
}
direct() { guest_aws -- --endpoint-url "https://127.0.0.1:$port" --ca-bundle "$d/ca.pem" "$@"; }
proxied() {
    guest_aws HTTPS_PROXY="http://127.0.0.1:$px" -- --endpoint-url https://s3.amazonaws.com \
        --ca-bundle "$egress_ca" "$@"
}
leaks() { grep -c '"type":"compromised"' "$d/events.jsonl" || true; }

# ---- 1. the placeholders alone are worth nothing ----
echo "hello from slate" >"$d/small.txt"
head -c $((12 * 1024 * 1024 + 321)) /dev/urandom >"$d/big.bin"
if direct s3 mb s3://bkt >"$d/out" 2>&1; then fail "the server took the placeholder credentials"; fi
grep -q InvalidAccessKeyId "$d/out" || fail "direct mb: $(cat "$d/out")"
if direct s3 ls >"$d/out" 2>&1; then fail "the server listed for the placeholder credentials"; fi
log "placeholder credentials straight to the server: refused"

# ---- 2. through the proxy, re-signed ----
proxied s3 mb s3://bkt >"$d/out" 2>&1 || fail "mb through the proxy: $(cat "$d/out")"
proxied s3 cp --only-show-errors "$d/small.txt" s3://bkt/dir/small.txt 2>"$d/out" ||
    fail "put through the proxy: $(cat "$d/out")"
proxied s3 cp --only-show-errors "$d/big.bin" s3://bkt/big.bin 2>"$d/out" ||
    fail "multipart put through the proxy: $(cat "$d/out")"
grep -q '"method": "POST", "path": "/bkt/big.bin", "status": 200' "$d/server.log" ||
    fail "the 12 MiB upload was not multipart"
[ "$(grep -c '"method": "PUT", "path": "/bkt/big.bin", "status": 200' "$d/server.log")" -ge 3 ] ||
    fail "the multipart upload did not send its parts"
proxied s3 ls s3://bkt >"$d/ls.out" 2>&1 || fail "ls through the proxy: $(cat "$d/ls.out")"
if ! grep -q 'big.bin' "$d/ls.out" || ! grep -q 'PRE dir/' "$d/ls.out"; then
    fail "ls: $(cat "$d/ls.out")"
fi
proxied s3 cp --only-show-errors s3://bkt/big.bin "$d/big.out" 2>"$d/out" ||
    fail "get through the proxy: $(cat "$d/out")"
cmp -s "$d/big.bin" "$d/big.out" || fail "the object came back different"
proxied s3api put-object --bucket bkt --key api/obj.txt --body "$d/small.txt" >"$d/out" 2>&1 ||
    fail "s3api put-object through the proxy: $(cat "$d/out")"
url=$(proxied s3 presign s3://bkt/dir/small.txt --expires-in 300) || fail "presign failed"
case "$url" in
*"X-Amz-Credential=$PH_ID"*) ;;
*) fail "the presigned URL is not the placeholder's: $url" ;;
esac
curl -sS --max-time 20 --proxy "http://127.0.0.1:$px" --cacert "$egress_ca" -o "$d/presigned.out" \
    -w '%{http_code}' "$url" >"$d/st" || fail "presigned GET through the proxy failed"
[ "$(cat "$d/st")" = 200 ] || fail "presigned GET through the proxy: $(cat "$d/st") $(cat "$d/presigned.out")"
cmp -s "$d/small.txt" "$d/presigned.out" || fail "presigned GET returned other bytes"
# The same URL straight to the server: the placeholder's signature is refused.
st=$(curl -s --max-time 20 --cacert "$d/ca.pem" -o /dev/null -w '%{http_code}' \
    "${url/https:\/\/s3.amazonaws.com/https://127.0.0.1:$port}" || true)
[ "$st" = 403 ] || fail "the placeholder's presigned URL straight to the server: $st"
log "through the proxy: mb, put, multipart put, ls, get, put-object, presigned get: ok"

# Signed aws-chunked uploads (the AWS CLI does not send them; s3server.py's signer does, with
# the placeholder credentials), over a CONNECT tunnel: $d/tsend.py proxy|direct PORT CA HOST REQ.
cat >"$d/tsend.py" <<'EOF'
import socket, ssl, sys, time
mode, port, ca, host, req = sys.argv[1:6]
raw = open(req, "rb").read()
s = socket.create_connection(("127.0.0.1", int(port)), timeout=120)
if mode == "proxy":
    s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        b = s.recv(1)
        if not b:
            sys.exit("the proxy closed the CONNECT")
        head += b
    if b" 200 " not in head.split(b"\r\n")[0]:
        sys.exit("CONNECT: %r" % head)
ctx = ssl.create_default_context(cafile=ca)
t = ctx.wrap_socket(s, server_hostname=host if mode == "proxy" else "127.0.0.1")
t0 = time.monotonic()
resp = b""
try:
    t.sendall(raw)  # a refusal mid-body may cut it short: read what came back
except OSError:
    pass
try:
    while True:
        b = t.recv(65536)
        if not b:
            break
        resp += b
except OSError:
    pass
dt = time.monotonic() - t0
print(resp.split(b"\r\n")[0].decode("latin-1") if resp else "closed")
if len(sys.argv) > 6:
    open(sys.argv[6], "w").write("%.6f\n" % dt)
EOF
tunnel() { "$py" "$d/tsend.py" proxy "$px" "$egress_ca" s3.amazonaws.com "$@"; }
guest_stream() {
    env AWS_ACCESS_KEY_ID="$PH_ID" AWS_SECRET_ACCESS_KEY="$PH_SECRET" AWS_SESSION_TOKEN="$PH_TOKEN" \
        "$py" "$s3server" stream --host s3.amazonaws.com "$@"
}
head -c $((3 * 1024 * 1024 + 17)) /dev/urandom >"$d/stream.bin"
guest_stream --body-file "$d/stream.bin" /bkt/stream.bin >"$d/r.stream"
guest_stream --trailer --chunk 100000 --body-file "$d/stream.bin" /bkt/stream-trailer.bin \
    >"$d/r.trailer"
head -c 100000 "$d/stream.bin" >"$d/stream-small.bin"
guest_stream --chunk 8192 --body-file "$d/stream-small.bin" /bkt/stream-small.bin >"$d/r.small"
st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.stream")
case "$st" in *" 403 "*) ;; *) fail "the server took the guest's own streaming signature: $st" ;; esac
for r in stream trailer small; do
    st=$(tunnel "$d/r.$r") || fail "streaming put ($r) through the proxy failed"
    case "$st" in *" 200 "*) ;; *) fail "streaming put ($r) through the proxy: $st" ;; esac
done
grep -q '"method": "PUT", "path": "/bkt/stream-trailer.bin", "status": 200, "auth": "header", "payload": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"' \
    "$d/server.log" || fail "the trailer upload was not streamed as signed aws-chunked"
for k in stream.bin stream-trailer.bin; do
    proxied s3 cp --only-show-errors "s3://bkt/$k" "$d/back.bin" 2>"$d/out" || fail "get $k: $(cat "$d/out")"
    cmp -s "$d/stream.bin" "$d/back.bin" || fail "$k came back different"
done
log "signed aws-chunked puts through the proxy (3 MiB in 64 KiB chunks, with a trailer, small): ok"

# The audit trail: each re-signature, with the masked key id; never a real value.
grep -q '"sigv4":{"service":"s3","region":"us-east-1","key_id":"AKIA' "$d/events.jsonl" ||
    fail "no sigv4 audit events: $(tail -n 3 "$d/events.jsonl")"
grep -q '"payload":"STREAMING-AWS4-HMAC-SHA256-PAYLOAD"' "$d/events.jsonl" ||
    fail "the streaming re-signature is not in the audit trail"
grep -q '"auth":"presigned"' "$d/events.jsonl" || fail "the presigned re-signature is not audited"
for v in "$REAL_ID" "$REAL_SECRET" "$REAL_TOKEN"; do
    if grep -qF -- "$v" "$d/events.jsonl" "$d/proxy.log"; then
        fail "a real credential is in the audit trail or the proxy's log"
    fi
done

# A header signature without x-amz-content-sha256 (botocore's SigV4Auth, as for STS): the proxy
# hashes the body (up to 256 KiB) and re-signs over it; a larger body is refused with 413. The
# server verifies it as STS would (the payload line is the hash of the body it received), so it
# accepts it only if the proxy signed over exactly the bytes it forwarded; the audit event says
# it was re-signed over the body's hash.
guest_plain() { # BODY-FILE REQUEST-FILE
    env AWS_ACCESS_KEY_ID="$PH_ID" AWS_SECRET_ACCESS_KEY="$PH_SECRET" AWS_SESSION_TOKEN="$PH_TOKEN" \
        "$py" - "$@" <<'EOF'
import os, sys
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
body = open(sys.argv[1], "rb").read()
req = AWSRequest(method="POST", url="https://s3.amazonaws.com/sts", data=body,
                 headers={"Content-Type": "application/x-www-form-urlencoded"})
creds = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                    os.environ["AWS_SESSION_TOKEN"])
SigV4Auth(creds, "sts", "us-east-1").add_auth(req)
hs = [(k, v) for k, v in req.headers.items() if k.lower() != "content-length"]
head = "POST /sts HTTP/1.1\r\nHost: s3.amazonaws.com\r\n" + "".join(
    "%s: %s\r\n" % (k, v) for k, v in hs)
head += "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
open(sys.argv[2], "wb").write(head.encode() + body)
EOF
}
head -c 150000 /dev/urandom | base64 -w0 >"$d/form.txt"
guest_plain "$d/form.txt" "$d/r.sts"
grep -qi '^x-amz-content-sha256' "$d/r.sts" && fail "the STS-style request carries x-amz-content-sha256"
st=$(tunnel "$d/r.sts")
case "$st" in *" 200 "*) ;; *) fail "the body-hashed STS request through the proxy: $st" ;; esac
grep -q '"method": "POST", "path": "/sts", "status": 200, "auth": "header", "payload": "sha256", "code": null, "service": "sts"' "$d/server.log" ||
    fail "the server did not verify the body-hashed request: $st $(grep sts "$d/server.log")"
st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.sts")
case "$st" in *" 403 "*) ;; *) fail "the server took the guest's own STS signature: $st" ;; esac
grep '"path":"\\/sts"' "$d/events.jsonl" | grep -q '"service":"sts","region":"us-east-1","key_id":"AKIA[^"]*","payload":"sha256"' ||
    fail "the body-hashed request was not re-signed: $(grep sts "$d/events.jsonl")"
head -c 240000 /dev/urandom | base64 -w0 >"$d/form.txt"
guest_plain "$d/form.txt" "$d/r.sts-big"
st=$(tunnel "$d/r.sts-big")
case "$st" in *" 413 "* | closed) ;; *) fail "a 320 KB body to hash: $st" ;; esac
[ "$(grep -c '"path": "/sts", "status": 200' "$d/server.log")" = 1 ] || fail "the 320 KB body to hash was forwarded"
log "header signature without x-amz-content-sha256: body hashed and re-signed; over 256 KiB: $st"

# A non-S3 service (API Gateway, execute-api): the path is normalised (dot and empty segments)
# and every escape in it encoded a second time (%20 -> %2520), the query sorted and encoded, the
# payload line the hash of the body. botocore signs with the placeholders; the server checks
# with the real key and these rules, written from the specification independently of botocore
# (first shown to agree with botocore on a request signed with the real key).
api=abc123.execute-api.us-east-1.amazonaws.com
api_path='/prod/items/a%20b%2Bc/./x//y/../z?q=1&a=b%20c&empty='
printf '{"name": "slate", "n": %d}' $$ >"$d/api.json"
sign_api() { # ID SECRET TOKEN HOST OUT
    env AWS_ACCESS_KEY_ID="$1" AWS_SECRET_ACCESS_KEY="$2" AWS_SESSION_TOKEN="$3" \
        "$py" "$s3server" sign --service execute-api --method POST --body-file "$d/api.json" \
        --header "Content-Type:application/json" --host "$4" "$api_path" >"$5"
}
api_log() { grep -c '"method": "POST", "path": "/prod/items/a%20b%2Bc/./x//y/../z", "status": 200, "auth": "header", "payload": "sha256", "code": null, "service": "execute-api"' "$d/server.log" || true; }
sign_api "$REAL_ID" "$REAL_SECRET" "$REAL_TOKEN" "127.0.0.1:$port" "$d/r.api-real"
st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.api-real")
case "$st" in *" 200 "*) ;; *) fail "the server disagrees with botocore on execute-api: $st" ;; esac
[ "$(api_log)" = 1 ] || fail "the server did not log the execute-api request"
sign_api "$PH_ID" "$PH_SECRET" "$PH_TOKEN" "$api" "$d/r.api"
grep -qi '^x-amz-content-sha256' "$d/r.api" && fail "the execute-api request carries x-amz-content-sha256"
st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.api")
case "$st" in *" 403 "*) ;; *) fail "the server took the guest's own execute-api signature: $st" ;; esac
st=$("$py" "$d/tsend.py" proxy "$px" "$egress_ca" "$api" "$d/r.api")
case "$st" in *" 200 "*) ;; *) fail "execute-api through the proxy: $st $(tail -n 2 "$d/server.log")" ;; esac
[ "$(api_log)" = 2 ] || fail "the server did not verify the re-signed execute-api request"
grep '"host":"abc123.execute-api' "$d/events.jsonl" |
    grep -q '"service":"execute-api","region":"us-east-1","key_id":"AKIA[^"]*","payload":"sha256"' ||
    fail "the execute-api request was not re-signed: $(grep execute-api "$d/events.jsonl" | tail -n 2)"
# Without a body (the empty body's hash, which the proxy signs at once): a GET with a UTF-8
# escape, a trailing slash and a repeated, unsorted query parameter; the real key's request
# straight and the placeholders' through the proxy are both verified, the latter refused straight.
get_api() { # ID SECRET TOKEN HOST OUT
    env AWS_ACCESS_KEY_ID="$1" AWS_SECRET_ACCESS_KEY="$2" AWS_SESSION_TOKEN="$3" \
        "$py" "$s3server" sign --service execute-api --method GET --host "$4" \
        '/prod/%E2%82%AC/trailing/?b=2&a=1&a=0' >"$5"
}
get_log() { grep -c '"method": "GET", "path": "/prod/%E2%82%AC/trailing/", "status": 200, "auth": "header", "payload": "sha256", "code": null, "service": "execute-api"' "$d/server.log" || true; }
get_api "$REAL_ID" "$REAL_SECRET" "$REAL_TOKEN" "127.0.0.1:$port" "$d/r.get-real"
st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.get-real")
case "$st" in *" 200 "*) ;; *) fail "the server disagrees with botocore on an execute-api GET: $st" ;; esac
get_api "$PH_ID" "$PH_SECRET" "$PH_TOKEN" "$api" "$d/r.get"
st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.get")
case "$st" in *" 403 "*) ;; *) fail "the server took the guest's own execute-api GET: $st" ;; esac
st=$("$py" "$d/tsend.py" proxy "$px" "$egress_ca" "$api" "$d/r.get")
case "$st" in *" 200 "*) ;; *) fail "execute-api GET through the proxy: $st $(tail -n 2 "$d/server.log")" ;; esac
[ "$(get_log)" = 2 ] || fail "the server did not verify the re-signed execute-api GET"
# curl signs it too (--aws-sigv4; curl 7.88 neither normalises nor encodes the path twice nor
# sorts the query, so a plain path and a sorted query), with the placeholders, a session token
# header it signs, and a form body.
st=$(curl -sS --max-time 20 --proxy "http://127.0.0.1:$px" --cacert "$egress_ca" -o "$d/api.out" \
    -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:execute-api" --user "$PH_ID:$PH_SECRET" \
    -H "x-amz-security-token: $PH_TOKEN" --data-binary @"$d/api.json" \
    "https://$api/prod/curl?a=1&b=2") || fail "curl execute-api through the proxy failed"
[ "$st" = 200 ] || fail "curl execute-api through the proxy: $st $(cat "$d/api.out")"
"$py" - "$d/api.out" "$d/api.json" <<'EOF' || fail "the server saw another body: $(cat "$d/api.out")"
import hashlib, json, sys
echo = json.load(open(sys.argv[1]))
sys.exit(echo["service"] != "execute-api" or
         echo["sha256"] != hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest())
EOF
log "non-S3 (sts, execute-api) signed over the body, path encoded twice: re-signed and verified"

# ---- 3. an aws-chunked body slate cannot re-sign: refused, nothing forwarded ----
# Signed by the guest, then the second chunk's signature made non-hex.
guest_stream --chunk 8192 --body-file "$d/stream-small.bin" /bkt/stream-bad.bin >"$d/r.bad0"
"$py" - "$d/r.bad0" "$d/r.bad" <<'EOF'
import sys
raw = open(sys.argv[1], "rb").read()
head, _, body = raw.partition(b"\r\n\r\n")
i = body.index(b";chunk-signature=", 100) + len(b";chunk-signature=")
open(sys.argv[2], "wb").write(head + b"\r\n\r\n" + body[:i] + b"Z" + body[i + 1:])
EOF
st=$(tunnel "$d/r.bad") || true
# The 400 may not reach a client still sending (the proxy closes on it): the audit event tells.
case "$st" in *" 400 "* | closed) ;; *) fail "a malformed aws-chunked body: $st" ;; esac
grep 'stream-bad.bin",' "$d/events.jsonl" | grep -q '"status":400,.*"refused":"cannot re-sign this AWS request' ||
    fail "the malformed aws-chunked body was not refused with 400: $(grep stream-bad "$d/events.jsonl")"
if grep -q '"/bkt/stream-bad.bin"' "$d/server.log"; then
    fail "the malformed aws-chunked body reached the server"
fi
log "malformed aws-chunked body: $st, nothing forwarded"

# ---- 4. the placeholder key id towards an unbound host is a leak ----
[ "$(leaks)" = 0 ] || fail "a leak was reported for the bound host"
lines_before=$(wc -l <"$d/server.log")
if guest_aws HTTPS_PROXY="http://127.0.0.1:$px" -- --endpoint-url https://unbound.test \
    --ca-bundle "$egress_ca" s3 ls s3://bkt >"$d/out" 2>&1; then
    fail "the placeholder key id went to an unbound host"
fi
[ "$(leaks)" -ge 1 ] || fail "the leak to an unbound host was not reported: $(cat "$d/out")"
ts=$(date -u +%Y%m%dT%H%M%SZ)
st=$(curl -sS --max-time 20 --proxy "http://127.0.0.1:$px" --cacert "$egress_ca" -o "$d/body" \
    -w '%{http_code}' -H "X-Amz-Date: $ts" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
    -H "Authorization: AWS4-HMAC-SHA256 Credential=$PH_ID/${ts%T*}/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=$(printf '0%.0s' $(seq 64))" \
    https://unbound.test/bkt/steal) || true
[ "$st" = 451 ] || fail "the placeholder key id to an unbound host: $st $(cat "$d/body")"
grep -q compromised "$d/body" || fail "the 451 does not explain: $(cat "$d/body")"
[ "$(wc -l <"$d/server.log")" = "$lines_before" ] || fail "a leaking request reached the server"
log "placeholder key id towards unbound.test: 451, compromise reported, nothing forwarded"

# ---- 5. streaming upload throughput: through the proxy vs straight with the real key ----
# Three runs each, best kept: straight to the server with the real key; through the proxy with
# the placeholder (re-signed); and through the proxy with the real key (not a placeholder: passed
# on as it is), which tells the proxy's own cost from the re-signing's.
mib=${SIGV4_PROXY_BENCH_MIB:-64}
head -c $((mib * 1024 * 1024)) /dev/urandom >"$d/bench.bin"
guest_stream --body-file "$d/bench.bin" /bkt/bench-proxy.bin >"$d/r.bench-proxy"
real_stream() {
    env AWS_ACCESS_KEY_ID="$REAL_ID" AWS_SECRET_ACCESS_KEY="$REAL_SECRET" AWS_SESSION_TOKEN="$REAL_TOKEN" \
        "$py" "$s3server" stream --body-file "$d/bench.bin" "$@"
}
real_stream --host "127.0.0.1:$port" /bkt/bench-direct.bin >"$d/r.bench-direct"
real_stream --host s3.amazonaws.com /bkt/bench-plain.bin >"$d/r.bench-plain"
best() { "$py" -c 'import sys; print(min(float(x) for x in sys.argv[1:] if x))' "$@"; }
t_direct='' t_proxy='' t_plain=''
for _ in 1 2 3; do
    st=$("$py" "$d/tsend.py" direct "$port" "$d/ca.pem" 127.0.0.1 "$d/r.bench-direct" "$d/t")
    case "$st" in *" 200 "*) ;; *) fail "direct streaming upload: $st" ;; esac
    t_direct=$(best "$(cat "$d/t")" "$t_direct")
    st=$(tunnel "$d/r.bench-proxy" "$d/t")
    case "$st" in *" 200 "*) ;; *) fail "streaming upload through the proxy: $st" ;; esac
    t_proxy=$(best "$(cat "$d/t")" "$t_proxy")
    st=$(tunnel "$d/r.bench-plain" "$d/t")
    case "$st" in *" 200 "*) ;; *) fail "real-key streaming upload through the proxy: $st" ;; esac
    t_plain=$(best "$(cat "$d/t")" "$t_plain")
done
"$py" - "$mib" "$t_direct" "$t_proxy" "$t_plain" >"$d/bench.txt" <<'EOF'
import sys
mib, d, p, q = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print("sigv4 streaming upload of %d MiB (64 KiB aws-chunks, best of 3): direct with the real key "
      "%.1f MiB/s; through the proxy re-signed %.1f MiB/s (%.2fx); through the proxy not "
      "re-signed (real key) %.1f MiB/s (%.2fx)" % (mib, mib / d, mib / p, d / p, mib / q, d / q))
EOF
log "$(cat "$d/bench.txt")"
