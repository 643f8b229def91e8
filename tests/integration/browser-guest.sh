#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# slate-guest's browser VM side (issue 24, doc/guest-channel.md "The browser VM") in a workspace
# of the browser image, driven through `slate exec -- slate-guest --browser` (the same protocol
# as the host's "browser" stream), under TCG:
#  - the agent listens on 127.0.0.1:9222 (the workspace's cdp end) and 3128;
#  - ca + window + start: "ok ready_ms=N"; DevTools answer on 127.0.0.1:9223; Chromium runs as
#    uid 1000, never root; the CA is in the user's NSS database; stop: "stopped", the tmpfs
#    profile and every Chromium process gone;
#  - Chromium killed from outside: "exited signal=9", then "stopped";
#  - persist, on the workspace's own /dev/vdb (its home, unmounted first: the browser VM's
#    profile disk is vdb too): LUKS2 formatted, opened, ext4 made, mounted; a file in the profile
#    survives a stop and a start with the same key; a wrong key answers cryptsetup's error and
#    leaves nothing open.
# The host's cdp relay (a 9222 connection reaching 9223 in another VM) is slated's, not tested here.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

# shellcheck disable=SC2034 # lib.sh reads them
SLATE_TEST_SNAPSHOTS='' SLATE_TEST_BOOT_SNAPSHOTS=off

ensure_libvirt

browser_dir=${SLATE_TEST_BROWSER_IMAGE_DIR:-$top_builddir/images/browser/out}
if [ -z "${SLATE_TEST_BROWSER_IMAGE_DIR:-}" ]; then
    log "make browser-image"
    if ! make -s -C "$top_builddir" browser-image >"$test_tmpdir/browser-image.log" 2>&1; then
        sed 's/^/#   /' "$test_tmpdir/browser-image.log" | tail -n 20
        if grep -qE "apt-get (download .*|update) failed|apt's package lists are missing|not found: apt-get install|amd64 hosts only|unknown Debian package|apt knows no installable version" \
            "$test_tmpdir/browser-image.log"; then
            skip "the browser image cannot be built here (see above)"
        fi
        fail "make browser-image failed"
    fi
fi
for f in disk.img vmlinuz initrd.img; do
    [ -f "$browser_dir/$f" ] || fail "$browser_dir/$f is missing"
done

ws=bg$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

mnt=$(make_loop_fs btrfs browserg 3G)
# shellcheck disable=SC2034 # start_slated reads it
state=$mnt/state
start_slated
s image import browser "$browser_dir/disk.img" --kernel "$browser_dir/vmlinuz" \
    --initrd "$browser_dir/initrd.img" --cmdline "console=ttyS0" >/dev/null ||
    fail "importing the browser image"
s create $ws --image browser --memory 1024 --cpus 1 --home-size 512M >/dev/null
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"

# The agent's listeners: 127.0.0.1:9222 (0x2406, the cdp relay) and 3128 (0x0C38), LISTEN (0A).
tcp=$(s exec $ws -- cat /proc/net/tcp)
grep -q ' 0100007F:2406 00000000:0000 0A ' <<<"$tcp" || fail "nothing listens on 127.0.0.1:9222: $tcp"
grep -q ' 0100007F:0C38 00000000:0000 0A ' <<<"$tcp" || fail "nothing listens on 127.0.0.1:3128"

# One `slate-guest --browser` session: its stdin a fifo on fd 3, its answers in $work/b.out.
b_start() {
    rm -f "$work/b.in" "$work/b.out"
    mkfifo "$work/b.in"
    s exec -i --user root --timeout 600 $ws -- slate-guest --browser <"$work/b.in" \
        >"$work/b.out" 2>"$work/b.err" &
    b_pid=$!
    exec 3>"$work/b.in"
}
b_send() { printf '%s\n' "$@" >&3; }
# b_wait REGEX SECONDS: a line of the answers matches.
b_wait() {
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        grep -qE "$1" "$work/b.out" && return 0
        kill -0 "$b_pid" 2>/dev/null || break
        sleep 0.2
    done
    grep -qE "$1" "$work/b.out" || {
        log "answers: $(cat "$work/b.out") $(cat "$work/b.err")"
        s exec --user root $ws -- tail -n 30 /run/slate/browser.log >&2 || true
        s exec --user root $ws -- ps >&2 || true
        return 1
    }
}
b_end() {
    exec 3>&-
    wait "$b_pid" || true
}
# Chromium's processes in the guest, as "PID UID" lines.
chromes() {
    # shellcheck disable=SC2016 # the guest's shell expands it
    s exec --user root $ws -- sh -c 'for p in /proc/[0-9]*; do
        case "$(cat $p/comm 2>/dev/null)" in chrom*|headless*)
            set -- $(grep "^Uid:" $p/status) && echo "${p#/proc/} $2";; esac; done'
}
# The browser process: Chromium's process with the DevTools port in its arguments, no --type=.
chrome_main() {
    # shellcheck disable=SC2016 # the guest's shell expands it
    s exec --user root $ws -- sh -c 'for p in /proc/[0-9]*; do
        a=$(tr "\0" " " <$p/cmdline 2>/dev/null) || continue
        case "$a" in *--type=*) ;; *--remote-debugging-port=*) echo "${p#/proc/} $a";; esac
        done'
}

# --- ephemeral profile, with the egress CA ---
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=slate test egress CA" -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
b_start
b_send "ca $(stat -c %s "$work/ca.pem")"
cat "$work/ca.pem" >&3
b_send "window 800x600" start
b_wait '^ok ready_ms=[0-9]+$' 150 || fail "no ok within 150 s"
log "ephemeral: $(grep '^ok' "$work/b.out")"
s exec $ws -- curl -s --noproxy '*' http://127.0.0.1:9223/json/version >"$work/version.json" ||
    fail "DevTools do not answer on 127.0.0.1:9223"
grep -q '"Browser": "HeadlessChrome/' "$work/version.json" || fail "$(cat "$work/version.json")"
# The relay is transparent to CDP clients: the debugger URL follows the request's Host, so a client
# of the workspace's 127.0.0.1:9222 is sent back to 9222, not to the browser VM's 9223.
s exec $ws -- curl -s --noproxy '*' -H 'Host: 127.0.0.1:9222' http://127.0.0.1:9223/json/version \
    >"$work/version.json" || fail "DevTools do not answer with Host: 127.0.0.1:9222"
grep -q '"webSocketDebuggerUrl": "ws://127.0.0.1:9222/devtools/browser/' "$work/version.json" ||
    fail "the debugger URL does not follow Host: $(cat "$work/version.json")"
chromes >"$work/chromes"
[ -s "$work/chromes" ] || fail "no Chromium process"
awk '$2 != 1000 { exit 1 }' "$work/chromes" || fail "Chromium runs as another user: $(cat "$work/chromes")"
log "Chromium processes (pid uid): $(paste -sd ' ' "$work/chromes")"
# Chromium's own sandbox, not --no-sandbox: its renderers run under seccomp-bpf (Seccomp: 2) in
# a PID namespace of their own (two NSpid numbers).
# shellcheck disable=SC2016 # the guest's shell expands it
s exec -i --user root $ws -- sh -c 'for p in $(cut -d" " -f1); do
    grep -q "^Seccomp:\s*2" /proc/$p/status && grep -qE "^NSpid:\s*[0-9]+\s+[0-9]+" /proc/$p/status &&
    exit 0; done; exit 1' <"$work/chromes" || fail "no Chromium process is sandboxed"
s exec $ws -- certutil -L -d sql:/home/slate/.pki/nssdb >"$work/certs" ||
    fail "certutil -L failed"
grep -q '^slate-egress  *C,,' "$work/certs" || fail "the CA is not trusted: $(cat "$work/certs")"
chrome_main >"$work/main"
grep -q -- '--window-size=800,600 ' "$work/main" || fail "Chromium's arguments: $(cat "$work/main")"
grep -q -- '--proxy-server=http://127.0.0.1:3128 ' "$work/main" || fail "no proxy: $(cat "$work/main")"
s exec $ws -- test -d /run/slate/browser-profile || fail "no tmpfs profile"
b_send stop
b_wait '^stopped ms=[0-9]+$' 30 || fail "no stopped within 30 s"
b_end
log "ephemeral stop: $(grep '^stopped' "$work/b.out")"
[ "$(wc -l <"$work/b.out")" = 2 ] || fail "answers: $(cat "$work/b.out")"
[ -z "$(chromes)" ] || fail "Chromium still runs after the stop: $(chromes)"
s exec $ws -- test ! -e /run/slate/browser-profile || fail "the tmpfs profile is left"

# --- Chromium exits by itself; the stream's EOF before start is a quiet end ---
b_start
b_send start
b_wait '^ok ready_ms=' 150 || fail "no ok (second start)"
chrome_main >"$work/main"
main_pid=$(sed -n '1s/ .*//p' "$work/main")
[ -n "$main_pid" ] || fail "no Chromium browser process"
s exec --user root $ws -- kill -9 "$main_pid"
b_wait '^stopped ms=' 30 || fail "no stopped after Chromium was killed"
b_end
grep -q '^exited signal=9$' "$work/b.out" || fail "no exited line: $(cat "$work/b.out")"
[ -z "$(chromes)" ] || fail "Chromium left after its exit: $(chromes)"

# --- persist, on /dev/vdb (the workspace's home here) ---
s exec --user root $ws -- umount /home/slate || fail "cannot unmount the home"
key=$(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n')
b_start
b_send "persist $key" start
b_wait '^ok ready_ms=' 180 || fail "no ok with persist"
log "persist, first: $(grep '^ok' "$work/b.out")"
s exec --user root $ws -- cryptsetup isLuks /dev/vdb || fail "/dev/vdb is not LUKS"
s exec --user root $ws -- grep -q '^/dev/mapper/slate-profile /var/lib/slate-browser ext4 ' \
    /proc/mounts || fail "the profile is not mounted: $(s exec $ws -- cat /proc/mounts)"
s exec $ws -- sh -c 'echo kept >/var/lib/slate-browser/profile/slate-test-marker' ||
    fail "the profile is not the user's"
# The key is in no process's arguments (cryptsetup has exited by now; Chromium's are checked);
# the pattern comes on stdin, so that the check's own arguments do not hold it.
s exec --user root $ws -- sh -c "cat /proc/[0-9]*/cmdline | tr '\\0' '\\n' >/tmp/cmdlines"
s exec -i --user root $ws -- grep -q -F -f /dev/stdin /tmp/cmdlines <<<"$key" &&
    fail "the key is in a command line"
b_send stop
b_wait '^stopped ms=' 60 || fail "no stopped with persist"
b_end
s exec --user root $ws -- test ! -e /dev/mapper/slate-profile || fail "slate-profile left open"
s exec --user root $ws -- grep -q slate-browser /proc/mounts && fail "the profile is still mounted"
b_start
b_send "persist $key" start
b_wait '^ok ready_ms=' 180 || fail "no ok with persist (second)"
log "persist, second: $(grep '^ok' "$work/b.out")"
[ "$(s exec $ws -- cat /var/lib/slate-browser/profile/slate-test-marker)" = kept ] ||
    fail "the profile did not persist"
b_send stop
b_wait '^stopped ms=' 60 || fail "no stopped with persist (second)"
b_end
wrong=$(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n')
b_start
b_send "persist $wrong" start
b_wait '^error cryptsetup open: ' 60 || fail "a wrong key was not refused: $(cat "$work/b.out")"
b_end
log "wrong key: $(cat "$work/b.out")"
s exec --user root $ws -- test ! -e /dev/mapper/slate-profile || fail "slate-profile open after a wrong key"
[ -z "$(chromes)" ] || fail "Chromium runs after a wrong key"
