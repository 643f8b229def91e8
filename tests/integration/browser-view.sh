#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Watching and taking over a workspace's browser (issue 24, doc/browser.md "Watching and taking
# over") under TCG, through a private slated: the browser VM's first page is navigated (a CDP
# session from the workspace's guest, as browser.sh does) to a red page served on the host that
# turns green on a click; `slate browser WS view --no-viewer --json` names a unix socket, mode
# 0600 and owned by the caller; an RFB client (rfb-client.py) reads its framebuffer: mostly red;
# a click in its middle (an RFB PointerEvent) turns it green, read back from a later frame, so a
# bridge that serves no real frames or drops input fails. A second view call gives the same
# socket; uid 65534 cannot connect (EACCES); slated listens on no TCP port; DELETE .../view
# removes the socket; after `slate browser WS stop` no socket is left.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image
ensure_browser_image
command -v python3 >/dev/null || skip "python3 not found"
pick_python

ws=bv$$
page_pid=
on_exit destroy_domains "slate-$ws" "slate.browser-$ws"
on_exit stop_slated
on_exit stop_bg page_pid

cdp=$top_srcdir/tests/integration/cdp-client.py
rfb=$top_srcdir/tests/integration/rfb-client.py
mkdir -p "$work/www"
cat >"$work/www/index.html" <<'EOF'
<!DOCTYPE html>
<html><head><title>slate view test</title></head>
<body style="margin:0;height:100vh;background:rgb(255,0,0)">
<script>
document.body.onclick = () => { document.body.style.background = "rgb(0,200,0)"; };
</script></body></html>
EOF
"$py" - "$work/www" "$work/page.port" <<'EOF' &
import functools, http.server, os, sys
root, port_file = sys.argv[1:3]
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=root))
open(port_file + ".tmp", "w").write(str(srv.server_address[1]))
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
EOF
page_pid=$!
wait_file "$work/page.port" "$page_pid"
pp=$(cat "$work/page.port")

mnt=$(make_loop_fs btrfs bview 4G)
# shellcheck disable=SC2034 # start_slated reads it
state=$mnt/state
start_slated SLATE_PROXY_TEST_CONNECT_TO="page.view.test:80:127.0.0.1:$pp" -- --browser-image browser
import_test_image
s image import browser "$browser_image_dir/disk.img" --kernel "$browser_image_dir/vmlinuz" \
    --initrd "$browser_image_dir/initrd.img" --cmdline "console=ttyS0" >/dev/null ||
    fail "importing the browser image"
s create $ws --image test --memory 512 --cpus 1 --home-size 256M >/dev/null
s egress $ws deny-all >/dev/null
s egress $ws allow page.view.test >/dev/null
s egress $ws allow 127.0.0.1 >/dev/null
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"

[ "$(status s browser $ws view --no-viewer)" != 0 ] || fail "view without a browser succeeded"
s browser $ws start >/dev/null 2>"$work/err" ||
    fail "browser start: $(cat "$work/err") $(tail -n 20 "$work/slated.log")"
nc_cmd=(timeout -k 5 150 "$slate" --socket "$work/run/slated.sock" exec -i "$ws" -- nc 127.0.0.1 9222)
got=$("$py" "$cdp" navigate http://page.view.test/ -- "${nc_cmd[@]}" 2>"$work/err") ||
    fail "CDP navigate: $(cat "$work/err")"
[ "$got" = "slate view test" ] || fail "the page's title is '$got' $(grep -i 'page.view.test' "$work/slated.log" | tail -n 5)"

s browser $ws view --no-viewer --json >"$work/view.json" 2>"$work/err" ||
    fail "view: $(cat "$work/err") $(tail -n 20 "$work/slated.log")"
sock=$(jget socket <"$work/view.json")
[ "$sock" = "$work/run/vm/.browser-$ws/view.sock" ] || fail "the view's socket is $sock"
[ -S "$sock" ] || fail "no socket at $sock"
[ "$(stat -c '%a %u' "$sock")" = "600 $(id -u)" ] ||
    fail "the socket is $(stat -c '%a %u' "$sock"), not 600 $(id -u)"
log "view: $(cat "$work/view.json" | tr -d '\n ')"
# Idempotent while it runs: the same socket, the same inode.
ino=$(stat -c %i "$sock")
s browser $ws view --no-viewer --json >"$work/view2.json" || fail "a second view call failed"
[ "$(jget socket <"$work/view2.json")" = "$sock" ] && [ "$(stat -c %i "$sock")" = "$ino" ] ||
    fail "a second view call made a new socket"
# Without --json and --no-viewer where remote-viewer is missing: how to connect.
if ! command -v remote-viewer >/dev/null; then
    s browser $ws view >"$work/view.txt" 2>&1 || fail "view (text): $(cat "$work/view.txt")"
    grep -q "remote-viewer vnc+unix://$sock" "$work/view.txt" ||
        fail "view (text) says: $(cat "$work/view.txt")"
fi

# slated listens on no TCP port, the view's included.
! ss -ltnpH 2>/dev/null | grep -q "pid=$daemon_pid," || fail "slated listens on TCP: $(ss -ltnp | grep "pid=$daemon_pid,")"

t0=$(date +%s%N)
out=$(RFB_TIMEOUT=120 timeout 300 "$py" "$rfb" "$sock" expect red click green) ||
    fail "the framebuffer: $out $(tail -n 20 "$work/slated.log")"
t1=$(date +%s%N)
log "$(echo "$out" | tr '\n' ';') in $(((t1 - t0) / 1000000)) ms"

# Another uid cannot connect: the socket's mode is the view's access control.
if command -v setpriv >/dev/null; then
    # Let uid 65534 reach the socket (the test's own directory is 0700): then its mode alone,
    # not a directory on the way, must refuse it.
    chmod o+x "$work"
    setpriv --reuid=65534 --regid=65534 --clear-groups test -e "$sock" ||
        fail "uid 65534 cannot even reach $sock"
    rc=0
    other=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$py" - "$sock" connect <"$rfb") ||
        rc=$?
    [ "$rc" = 3 ] && [ "$other" = EACCES ] || fail "uid 65534 connecting: $other (exit $rc)"
fi

# DELETE .../view closes it; view again makes a new one; the browser's stop removes that too.
"$py" - "$work/run/slated.sock" "/v1/workspaces/$ws/browser/view" <<'EOF' >"$work/del.json" ||
import http.client, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
c = C("localhost")
c.request("DELETE", sys.argv[2])
r = c.getresponse()
print(r.read().decode())
sys.exit(0 if r.status == 200 else 1)
EOF
    fail "DELETE view: $(cat "$work/del.json")"
[ "$(jget stopped <"$work/del.json")" = true ] || fail "DELETE view: $(cat "$work/del.json")"
[ ! -e "$sock" ] || fail "the socket outlived DELETE .../view"
s browser $ws view --no-viewer --json >/dev/null || fail "view after DELETE"
[ -S "$sock" ] || fail "no socket after the second view"
s browser $ws stop >/dev/null 2>"$work/err" || fail "browser stop: $(cat "$work/err")"
[ ! -e "$sock" ] || fail "the socket outlived the browser"
[ ! -e "$work/run/vm/.browser-$ws" ] || fail "the browser's runtime files are left"
[ "$(status s browser $ws view --no-viewer)" != 0 ] || fail "view after stop succeeded"

s stop --force $ws >/dev/null 2>&1 || true
s rm --yes $ws >/dev/null || fail "rm $ws"
