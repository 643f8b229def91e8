#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A workspace's browser VM (issue 24, doc/browser.md) under TCG, through a private slated:
#   without a browser, 127.0.0.1:9222 in the workspace's guest answers 503 saying so;
#   `slate browser WS start` boots it from the browser image; from the workspace's guest,
#   curl 127.0.0.1:9222/json/version answers as HeadlessChrome with a ws://127.0.0.1:9222 URL;
#   a CDP session (cdp-client.py, its bytes leaving from the guest through nc) navigates to a
#   page served on the host, reached through slated's proxy under the workspace's egress policy
#   (deny-all but that host), and reads its title back; the request shows in `slate trace`;
#   a host the policy denies does not reach the server;
#   `slate browser WS --screenshot` writes a PNG that shows the red page (pixels decoded here);
#   after stop no domain, disk or socket is left, and 9222 answers 503 again;
#   --persist keeps a cookie and local storage across stop and start, and the profile disk holds
#   none of it in the clear; a slated killed with -9 leaves a browser VM that the next slated
#   removes, with its files; the workspace's stop stops its browser; wipe-home drops the profile.
# Logs boot-to-CDP-ready (doc/performance.md). Skips where the browser image cannot be built.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image
ensure_browser_image
command -v python3 >/dev/null || skip "python3 not found"
pick_python

ws=bw$$
page_pid=
on_exit destroy_domains "slate-$ws" "slate.browser-$ws"
on_exit stop_slated
on_exit stop_bg page_pid

cdp=$top_srcdir/tests/integration/cdp-client.py
title="slate browser test $$"
mkdir -p "$work/www"
printf '<html><head><title>%s</title></head><body style="margin:0;background:rgb(255,0,0)">%s</body></html>\n' \
    "$title" "" >"$work/www/index.html"
# The page's server, on the host's 127.0.0.1 only; its log says which requests reached it.
"$py" - "$work/www" "$work/page.port" "$work/page.log" <<'EOF' &
import functools, http.server, sys
root, port_file, log_file = sys.argv[1:4]
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        with open(log_file, "a") as f:
            f.write("%s %s\n" % (self.headers.get("Host"), fmt % args))
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=root))
open(port_file + ".tmp", "w").write(str(srv.server_address[1]))
import os; os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
EOF
page_pid=$!
wait_file "$work/page.port" "$page_pid"
pp=$(cat "$work/page.port")
: >"$work/page.log"

# The proxy's test-only setting (doc/egress-proxy.md): these names lead to the page's server.
start_daemon() {
    start_slated SLATE_PROXY_TEST_CONNECT_TO="page.browser.test:80:127.0.0.1:$pp,denied.browser.test:80:127.0.0.1:$pp" \
        -- --browser-image browser
}
mnt=$(make_loop_fs btrfs browser 4G)
# shellcheck disable=SC2034 # start_slated reads it
state=$mnt/state
start_daemon
import_test_image
s image import browser "$browser_image_dir/disk.img" --kernel "$browser_image_dir/vmlinuz" \
    --initrd "$browser_image_dir/initrd.img" --cmdline "console=ttyS0" >/dev/null ||
    fail "importing the browser image"
s create $ws --image test --memory 512 --cpus 1 --home-size 256M >/dev/null
# Only the page's host: Chromium's own calls home (if any slipped through its flags) go nowhere.
s egress $ws deny-all >/dev/null
s egress $ws allow page.browser.test >/dev/null
s egress $ws allow 127.0.0.1 >/dev/null
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"
gx() { timeout -k 5 120 "$slate" --socket "$work/run/slated.sock" exec "$ws" -- "$@"; }
ms() { echo "$((($2 - $1) / 1000000))"; }

out=$(gx curl -s http://127.0.0.1:9222/json/version) || true
case "$out" in
*"no browser runs for this workspace"*) ;;
*) fail "without a browser, 9222 in the guest answered: $out" ;;
esac
[ "$(status s browser $ws stop)" != 0 ] || fail "stop without a browser succeeded"

t0=$(date +%s%N)
s browser $ws start --json >"$work/start.json" 2>"$work/err" ||
    fail "browser start: $(cat "$work/err") $(tail -n 20 "$work/slated.log")"
t1=$(date +%s%N)
log "browser start to CDP-ready: $(ms "$t0" "$t1") ms (boot $(jget boot_s <"$work/start.json") s, then DevTools $(jget cdp_ready_s <"$work/start.json") s)"
[ "$(jget running <"$work/start.json")" = true ] || fail "start: $(cat "$work/start.json")"
[ "$(status s browser $ws start)" != 0 ] || fail "a second start succeeded"

# From the workspace's guest, as an agent's tooling would.
gx curl -s http://127.0.0.1:9222/json/version >"$work/version.json" ||
    fail "curl 127.0.0.1:9222 in the guest failed"
grep -q '"Browser": "HeadlessChrome/' "$work/version.json" ||
    fail "/json/version does not say HeadlessChrome: $(cat "$work/version.json")"
grep -q '"webSocketDebuggerUrl": "ws://127.0.0.1:9222/devtools/browser/' "$work/version.json" ||
    fail "/json/version has no ws://127.0.0.1:9222 debugger URL: $(cat "$work/version.json")"
log "$(grep '"Browser"' "$work/version.json" | tr -s ' ')"

nc_cmd=(timeout -k 5 150 "$slate" --socket "$work/run/slated.sock" exec -i "$ws" -- nc 127.0.0.1 9222)
got=$("$py" "$cdp" navigate http://page.browser.test/ -- "${nc_cmd[@]}" 2>"$work/err") ||
    fail "CDP navigate: $(cat "$work/err")"
[ "$got" = "$title" ] || fail "the page's title read back is '$got', not '$title'"
grep -q "^page.browser.test \"GET / HTTP" "$work/page.log" ||
    fail "the page's server saw no request: $(cat "$work/page.log")"
s trace $ws >"$work/trace" 2>&1 || fail "trace: $(cat "$work/trace")"
grep -q "page.browser.test" "$work/trace" || fail "the trace lacks the browser's request: $(cat "$work/trace")"
# A screenshot, through slated's own DevTools stream.
s browser $ws --screenshot "$work/shot.png" 2>"$work/err" || fail "screenshot: $(cat "$work/err")"
"$py" "$top_srcdir/tests/integration/png-red.py" "$work/shot.png" 0.9 ||
    fail "the screenshot does not show the red page"

# A host the workspace's policy denies: the proxy refuses, the server sees nothing.
: >"$work/page.log"
"$py" "$cdp" navigate http://denied.browser.test/ -- "${nc_cmd[@]}" >/dev/null 2>&1 || true
[ ! -s "$work/page.log" ] || fail "a denied host reached the server: $(cat "$work/page.log")"

# The browser VM is no workspace: slate ls shows the one workspace only.
[ "$(s ls --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["workspaces"]))')" = 1 ] ||
    fail "slate ls while the browser runs: $(s ls)"
s browser $ws status --json >"$work/status.json"
[ "$(jget running <"$work/status.json")" = true ] || fail "status: $(cat "$work/status.json")"

# Stop: nothing of the browser is left.
s browser $ws stop --json >"$work/stop.json" 2>"$work/err" || fail "browser stop: $(cat "$work/err")"
[ "$(jget chromium_closed <"$work/stop.json")" = true ] ||
    fail "Chromium did not close cleanly: $(cat "$work/stop.json")"
v list --all --name | grep -qx "slate.browser-$ws" && fail "the browser domain is left"
[ ! -e "$work/run/vm/.browser-$ws" ] || fail "the browser's runtime files are left: $(ls -la "$work/run/vm/.browser-$ws")"
out=$(gx curl -s http://127.0.0.1:9222/json/version) || true
case "$out" in
*"no browser runs"*) ;;
*) fail "after stop, 9222 in the guest answered: $out" ;;
esac
[ "$(jget running < <(s browser $ws status --json))" = false ] || fail "status after stop"

# --persist: a cookie and a localStorage value survive stop and start; the profile disk holds
# neither in the clear (nor the cookie's name or host: Chromium encrypts cookie values by itself
# with a fixed key, so the value alone would prove little). Without --persist a start begins
# empty; wipe-home drops the kept profile.
wsdir=$(dirname "$(find "$state" -path "*/$ws/workspace.json" | head -1)")
ck_name=slatecookie$$ ck_val=cookievalue-$$-kept ls_val=lsvalue-$$-kept
t0=$(date +%s%N)
s browser $ws start --persist --json >"$work/persist.json" 2>"$work/err" ||
    fail "browser start --persist: $(cat "$work/err") $(tail -n 20 "$work/slated.log")"
t1=$(date +%s%N)
log "browser start --persist (a new profile disk) to CDP-ready: $(ms "$t0" "$t1") ms"
[ "$(jget persist <"$work/persist.json")" = true ] || fail "start --persist: $(cat "$work/persist.json")"
[ -f "$wsdir/browser-profile.key" ] && [ -f "$wsdir/browser-profile.img" ] ||
    fail "no kept profile in $wsdir: $(ls "$wsdir")"
[ "$(stat -c %a "$wsdir/browser-profile.key")" = 600 ] || fail "the profile key is not 0600"
"$py" "$cdp" navigate http://page.browser.test/ -- "${nc_cmd[@]}" >/dev/null 2>"$work/err" ||
    fail "CDP navigate (persist): $(cat "$work/err")"
"$py" "$cdp" set-cookie http://page.browser.test/ "$ck_name" "$ck_val" -- "${nc_cmd[@]}" 2>"$work/err" ||
    fail "CDP set-cookie: $(cat "$work/err")"
[ "$("$py" "$cdp" eval "localStorage.setItem('slatekey', '$ls_val'); 'set'" -- "${nc_cmd[@]}")" = set ] ||
    fail "localStorage.setItem"
"$py" "$cdp" cookies http://page.browser.test/ -- "${nc_cmd[@]}" >"$work/cookies" 2>"$work/err" ||
    fail "CDP cookies: $(cat "$work/err")"
grep -qx "$ck_name=$ck_val" "$work/cookies" || fail "the cookie was not set: $(cat "$work/cookies")"
s browser $ws stop --json >"$work/stop.json" 2>"$work/err" || fail "browser stop (persist): $(cat "$work/err")"
[ "$(jget chromium_closed <"$work/stop.json")" = true ] ||
    fail "Chromium did not close cleanly: $(cat "$work/stop.json")"
holds_bytes "$wsdir/browser-profile.img" "the profile disk (a LUKS header)" "LUKS"
for secret in "$ck_name" "$ck_val" "$ls_val" page.browser.test; do
    lacks_bytes "$wsdir/browser-profile.img" "the profile disk ($secret)" "$secret"
done
t0=$(date +%s%N)
s browser $ws start --persist >/dev/null 2>"$work/err" || fail "browser start --persist (2): $(cat "$work/err")"
t1=$(date +%s%N)
log "browser start --persist (the kept profile) to CDP-ready: $(ms "$t0" "$t1") ms"
"$py" "$cdp" cookies http://page.browser.test/ -- "${nc_cmd[@]}" >"$work/cookies" 2>"$work/err" ||
    fail "CDP cookies: $(cat "$work/err")"
grep -qx "$ck_name=$ck_val" "$work/cookies" ||
    fail "the cookie did not survive: $(cat "$work/cookies"); localStorage: $("$py" "$cdp" eval "localStorage.getItem('slatekey')" -- "${nc_cmd[@]}" 2>&1)"
"$py" "$cdp" navigate http://page.browser.test/ -- "${nc_cmd[@]}" >/dev/null 2>&1 || fail "navigate (persist 2)"
[ "$("$py" "$cdp" eval "localStorage.getItem('slatekey')" -- "${nc_cmd[@]}")" = "$ls_val" ] ||
    fail "the localStorage value did not survive"
s browser $ws stop >/dev/null 2>"$work/err" || fail "browser stop (persist 2): $(cat "$work/err")"
s browser $ws start >/dev/null 2>"$work/err" || fail "browser start (fresh): $(cat "$work/err")"
"$py" "$cdp" cookies http://page.browser.test/ -- "${nc_cmd[@]}" >"$work/cookies" 2>/dev/null || true
[ ! -s "$work/cookies" ] || fail "a start without --persist saw the kept profile: $(cat "$work/cookies")"

# A slated killed outright leaves that browser VM running; the next one removes it.
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=
v list --name | grep -qx "slate.browser-$ws" || fail "the browser VM did not outlive slated -9"
start_daemon
for _ in $(seq 100); do
    v list --all --name | grep -qx "slate.browser-$ws" || break
    sleep 0.1
done
v list --all --name | grep -qx "slate.browser-$ws" && fail "the next slated left the browser VM"
[ ! -e "$work/run/vm/.browser-$ws" ] || fail "the next slated left the browser's files"
grep -q "removing slate.browser-$ws, left by an earlier slated" "$work/slated.log" ||
    fail "the sweep did not say what it removed"

# The workspace's stop takes its browser along.
s browser $ws start >/dev/null 2>"$work/err" || fail "browser start (after the sweep): $(cat "$work/err")"
s stop --force $ws >/dev/null
for _ in $(seq 300); do
    v list --all --name | grep -qx "slate.browser-$ws" || break
    sleep 0.1
done
v list --all --name | grep -qx "slate.browser-$ws" && fail "the browser outlived its workspace"
for _ in $(seq 100); do
    [ -e "$work/run/vm/.browser-$ws" ] || break
    sleep 0.1
done
[ ! -e "$work/run/vm/.browser-$ws" ] || fail "the browser's files outlived its workspace"

s stop --force $ws >/dev/null 2>&1 || true
s wipe-home --yes $ws >/dev/null || fail "wipe-home $ws"
[ ! -e "$wsdir/browser-profile.key" ] && [ ! -e "$wsdir/browser-profile.img" ] ||
    fail "wipe-home left the kept profile: $(ls "$wsdir")"
s rm --yes $ws >/dev/null || fail "rm $ws"
