#!/bin/bash
# Workspaces through the real daemon and client, on each storage backend: loop-mounted btrfs
# (subvolumes), XFS with reflink=1 (FICLONE), and the embedded loop pool (state dir on ext4).
# Covers import, create, ls, describe, reset, wipe-home, wipe, rm, ownership (SO_PEERCRED, names
# and owners as another user sees them), the pool unmounted on a clean stop and by
# slated --cleanup, refusals (bad names, duplicates, unknown workspace, missing image, running
# workspace, full filesystem) and a kill -9 of slated in the middle of create and rm.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

# A user other than root, for names and owners (doc/workspace.md, "Workspace names").
tuser=slt-w$$
add_test_user "$tuser"
on_exit stop_slated

start_daemon() { # state-dir [NAME=VALUE...]
    local state=$1
    shift
    start_slated "$@"
}
qemu_as=$(qemu_user)
destroy_quietly() { virsh -q -c "$SLATE_TEST_URI" destroy "$1" >/dev/null 2>&1 || true; }

exercise_backend() { # state-dir expected-kind
    local state=$1 kind=$2 json
    log "backend $kind in $state"
    start_daemon "$state"
    s doctor --json | python3 -c 'import json,sys; c={x["check"]:x for x in json.load(sys.stdin)["checks"]}; assert c["storage"]["status"]=="ok" and c["storage"]["detail"].startswith(sys.argv[1]+":"), c["storage"]' "$kind" ||
        fail "doctor does not report storage $kind"

    # Import (root only) and list.
    import_test_image
    [ "$(s image ls --json | jget images.0.local)" = true ] || fail "imported image not local"
    expect_fail 1 "installed already" s image import test "$test_image_dir/disk.img"

    # Create: the disk is a clone sharing extents with the base; the home is sparse.
    s create ws1 --memory 1024 --cpus 1 --home-size 8G >/dev/null
    json=$(s describe ws1 --json)
    [ "$(jget storage <<<"$json")" = "$kind" ] || fail "describe storage: $(jget storage <<<"$json")"
    [ "$(jget mac <<<"$json" | cut -c1-9)" = "52:54:00:" ] || fail "mac $(jget mac <<<"$json")"
    [ "$(jget memory_mib <<<"$json")" = 1024 ] || fail "memory"
    [ "$(jget domain <<<"$json")" = slate-ws1 ] || fail "domain name"
    [ "$(jget usage.home.physical <<<"$json")" -lt $((64 << 20)) ] || fail "home is not sparse"
    [ "$(jget usage.home.logical <<<"$json")" = $((8 << 30)) ] || fail "home logical size"
    if [ "$kind" != qcow2 ]; then
        [ "$(jget usage.disk.shared <<<"$json")" -gt 0 ] || fail "disk.img shares no extent with the base"
    fi
    [ "$(s ls --json | jget workspaces.0.name)" = ws1 ] || fail "ls does not show ws1"
    s ls | grep -q "^ws1 .*stopped .*test" || fail "ls text: $(s ls)"

    # A directory above the state directory that QEMU's user cannot search (a 0700 one, as
    # mktemp -d makes): the start fails before the domain is defined, naming the directory, the
    # user and the fix, not with QEMU's bare "Permission denied".
    if [ "$kind" = btrfs ] && [ -n "$qemu_as" ]; then
        chmod 0700 "$(dirname "$state")"
        expect_fail 1 "start ws1: QEMU runs as user $qemu_as (uid [0-9]*, gid [0-9]*) and cannot search $(dirname "$state") (root:root, mode 0700): 'chmod o+x $(dirname "$state")'" \
            s start ws1
        chmod 0755 "$(dirname "$state")"
    fi

    # Refusals.
    expect_fail 1 "exists already" s create ws1
    expect_fail 2 "invalid name" s create Bad_Name
    # A shape's options are checked the same way by create, image snapshot and ci gitlab.
    expect_fail 2 "create: --memory 0: MiB or a size like 4G" s create ws9 --memory 0
    expect_fail 2 "create: --memory lots: MiB or a size like 4G" s create ws9 --memory lots
    expect_fail 2 "create: --cpus 257: a number from 1 to 256" s create ws9 --cpus 257
    expect_fail 2 "image snapshot: --memory 2X: MiB or a size like 4G" s image snapshot test --memory 2X
    expect_fail 2 "image snapshot: --cpus 0: 1 to 256" s image snapshot test --cpus 0
    expect_fail nonzero "--memory 0: MiB or a size like 4G" s ci gitlab prepare --memory 0
    expect_fail 2 "invalid name" s describe ../ws1
    [ "$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$work/run/slated.sock" \
        -X POST -d '{"name":"-x"}' http://slated/v1/workspaces)" = 400 ] || fail "daemon took a bad name"
    expect_fail 1 "no workspace named 'nope'" s describe nope
    expect_fail 1 "no workspace named 'nope'" s rm nope --yes
    expect_fail 1 "'missing' is not installed" s create ws9 --image missing
    expect_fail 2 "pass --yes" s rm ws1 </dev/null
    # What a workspace used (its disk, its home, through a symbolic link too) never becomes a
    # base image, even for root: every new workspace would start from it.
    ws1disk=$(find "$state" -path '*/ws1/disk.img' | head -1)
    [ -n "$ws1disk" ] || fail "ws1's disk.img not found"
    ln -sf "$ws1disk" "$work/link-$kind.img"
    for f in "$ws1disk" "$(dirname "$ws1disk")/home.img" "$work/link-$kind.img"; do
        expect_fail 1 "inside slated's state directory" s image import leak "$f"
    done
    expect_fail 1 "inside slated's state directory" s image import leak "$test_image_dir/disk.img" \
        --kernel "$(dirname "$ws1disk")/home.img" --initrd "$test_image_dir/initrd.img"
    s image ls --json | python3 -c 'import json,sys; assert all(i["id"] != "leak" for i in json.load(sys.stdin)["images"])' ||
        fail "a refused import left an image"

    # Another user sees none of root's workspaces and cannot touch them.
    chmod 0755 "$work/run"
    chmod 0666 "$work/run/slated.sock"
    [ "$(setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$work/run/slated.sock" ls --json | jget workspaces)" = "[]" ] ||
        fail "nobody sees root's workspaces"
    expect_fail 1 "no workspace named 'ws1'" setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$work/run/slated.sock" rm ws1 --yes
    expect_fail 1 "only root may import" setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$work/run/slated.sock" image import x /etc/shadow
    expect_fail 1 "only directories you own" setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$work/run/slated.sock" create mine --share /root
    # Every route that names a workspace, as nobody, on root's ws1: 404 "no workspace named"
    # (the same answer as for a name that does not exist), and ws1 is as it was. Each handler
    # checks on its own, so each is tried.
    before=$(find "$state" -path '*/ws1/workspace.json' -exec sha256sum {} +)
    [ -n "$before" ] || fail "ws1's workspace.json not found"
    for route in "GET /workspaces/ws1" "DELETE /workspaces/ws1" \
        "POST /workspaces/ws1/reset {}" "POST /workspaces/ws1/wipe-home {}" "POST /workspaces/ws1/wipe {}" \
        "POST /workspaces/ws1/start {}" "POST /workspaces/ws1/stop {\"force\":true}" \
        "POST /workspaces/ws1/console {}" "POST /workspaces/ws1/exec {\"argv\":[\"true\"]}" \
        "GET /workspaces/ws1/checkpoints" "POST /workspaces/ws1/checkpoints/1/revert {}" \
        "GET /workspaces/ws1/ssh-key" "POST /workspaces/ws1/ssh-key {}" \
        "POST /workspaces/ws1/ssh-key/import {\"private_key\":\"x\"}" \
        "GET /workspaces/ws1/egress" "POST /workspaces/ws1/egress {\"default\":\"deny-all\"}" \
        "GET /workspaces/ws1/trace" "GET /secrets?workspace=ws1" \
        "POST /secrets {\"workspace\":\"ws1\",\"key\":\"K\",\"value\":\"long-enough-value\",\"hosts\":[\"a.example\"]}" \
        "DELETE /secrets/K?workspace=ws1"; do
        read -r method path body <<<"$route"
        resp=$(setpriv --reuid=65534 --regid=65534 --clear-groups curl -s -w '\n%{http_code}' \
            --unix-socket "$work/run/slated.sock" -X "$method" \
            ${body:+-H 'Content-Type: application/json' --data "$body"} "http://slated/v1$path")
        code=${resp##*$'\n'}
        [ "$code" = 404 ] && grep -q "no workspace named 'ws1'" <<<"$resp" ||
            fail "nobody: $method $path answered $code: ${resp%$'\n'*}"
    done
    after=$(find "$state" -path '*/ws1/workspace.json' -exec sha256sum {} +)
    [ "$before" = "$after" ] || fail "nobody's requests changed ws1's workspace.json"
    [ "$(s describe ws1 --json | jget disk_present)" = true ] || fail "nobody's requests touched ws1's disk"
    # Workspace names are one namespace on the host, but what a user is told is their own: a
    # name another user holds is "not available", with neither "exists" nor whose; their own
    # taken name "exists already". Root's ls names each workspace's owner (last column); a
    # user's own list has no such column.
    ts() { as_user "$tuser" "$slate" --socket "$work/run/slated.sock" "$@"; }
    expect_fail 1 "creating workspace: the name 'ws1' is not available" ts create ws1
    grep -q "exists\|root" "$work/err" && fail "another user's name revealed: $(cat "$work/err")"
    ts create "u-$kind" >/dev/null
    expect_fail 1 "u-$kind exists already" ts create "u-$kind"
    s ls >"$work/ls"
    head -1 "$work/ls" | grep -q "^NAME .*DISK USE  OWNER$" || fail "root's ls has no OWNER column: $(cat "$work/ls")"
    grep -q "^ws1 .*stopped .*  root$" "$work/ls" && grep -q "^u-$kind .*stopped .*  $tuser$" "$work/ls" ||
        fail "root's ls: $(cat "$work/ls")"
    ts ls >"$work/ls"
    grep -q OWNER "$work/ls" || ! grep -q "^u-$kind .*stopped" "$work/ls" || grep -q "^ws1 " "$work/ls" &&
        fail "$tuser's ls: $(cat "$work/ls")"
    ts rm "u-$kind" --yes >/dev/null
    chmod 0660 "$work/run/slated.sock"

    # Reset, wipe-home, wipe: each says what it did and describe shows it; the share survives.
    mkdir -p "$work/share-$kind"
    echo keep >"$work/share-$kind/file"
    s create ws2 --share "$work/share-$kind:/src:ro" >/dev/null
    [ "$(s describe ws2 --json | jget shares.0.guest)" = /src ] || fail "share guest path"
    s reset ws2 --yes | grep -q "reset to its base image" || fail "reset output"
    [ "$(s describe ws2 --json | jget disk_present)" = false ] || fail "reset kept disk.img"
    [ "$(s describe ws2 --json | jget home_present)" = true ] || fail "reset lost the home"
    s wipe-home ws2 --yes >/dev/null
    [ "$(s describe ws2 --json | jget home_present)" = false ] || fail "wipe-home kept home.img"
    s wipe ws2 --yes >/dev/null
    [ "$(cat "$work/share-$kind/file")" = keep ] || fail "a verb touched the shared folder"

    # A running workspace refuses destructive verbs.
    # A domain of that name that merely runs (no disk: the firmware waits for a boot device).
    cat >"$work/dom.xml" <<XML
<domain type='qemu'><name>slate-ws2</name><memory unit='MiB'>32</memory>
<os><type arch='x86_64'>hvm</type></os><devices/></domain>
XML
    virsh -q -c "$SLATE_TEST_URI" create "$work/dom.xml" >/dev/null
    on_exit destroy_quietly slate-ws2
    [ "$(s describe ws2 --json | jget state)" = running ] || fail "state of a running domain"
    expect_fail 1 "is running: stop it first" s rm ws2 --yes
    expect_fail 1 "is running: stop it first" s reset ws2 --yes
    virsh -q -c "$SLATE_TEST_URI" destroy slate-ws2 >/dev/null

    # rm removes everything; the MAC is free again (a new workspace may get it).
    s rm ws2 --yes | grep -q "deleted workspace ws2" || fail "rm output"
    expect_fail 1 "no workspace named 'ws2'" s describe ws2
    s rm ws1 --yes >/dev/null
    [ "$(s ls --json | jget workspaces)" = "[]" ] || fail "ls after rm: $(s ls --json)"
    stop_slated
}

# btrfs and XFS, loop-mounted.
for fs in btrfs xfs; do
    mnt=$(make_loop_fs "$fs" "ws-$fs" 1G)
    exercise_backend "$mnt/state" "$([ "$fs" = btrfs ] && echo btrfs || echo reflink)"
done

# The embedded pool: a state dir on a filesystem without reflinks (ext4 here).
on_exit unmount "$work/ext4-state/pool"
exercise_backend "$work/ext4-state" pool
# A clean stop unmounts the pool when nothing uses it (doc/storage.md, "The pool"); the next start attaches it again.
start_daemon "$work/ext4-state"
s create survivor >/dev/null
stop_slated
mountpoint -q "$work/ext4-state/pool" && fail "the pool stays mounted after a clean stop, unused"
grep -q "unmounted the storage pool $work/ext4-state/pool" "$work/slated.log" || fail "the log does not say the pool was unmounted"
start_daemon "$work/ext4-state"
[ "$(s ls --json | jget workspaces.0.name)" = survivor ] || fail "pool not re-attached after unmount"
# In use (a file open in it, as QEMU holds a disk): it stays mounted, the log says so, and the
# next start reuses the mount. slated --cleanup refuses while a slated runs, then unmounts it and
# removes the runtime directory once nothing uses them.
exec 9<"$work/ext4-state/pool/workspaces"
stop_slated
mountpoint -q "$work/ext4-state/pool" || fail "the pool was unmounted while in use"
grep -q "storage pool $work/ext4-state/pool stays mounted: something has files open in it" "$work/slated.log" ||
    fail "the log does not say why the pool stays mounted"
start_daemon "$work/ext4-state"
[ "$(s ls --json | jget workspaces.0.name)" = survivor ] || fail "pool not reused after a restart"
expect_fail 1 "a slated serves state directory $work/ext4-state: stop it first" \
    "$slated" --cleanup --state-dir "$work/ext4-state" --runtime-dir "$work/run"
s rm survivor --yes >/dev/null
stop_slated
expect_fail 1 "stays mounted: something has files open" \
    "$slated" --cleanup --state-dir "$work/ext4-state" --runtime-dir "$work/run"
grep -q "^removed the runtime directory $work/run$" "$work/out" || fail "slated --cleanup said: $(cat "$work/out")"
[ -e "$work/run" ] && fail "slated --cleanup left $work/run"
exec 9<&-
# A running domain with a file in the pool keeps it mounted: libvirt is asked, since QEMU in
# libvirt's own mount namespace does not keep the host's mount busy.
truncate -s 1M "$work/ext4-state/pool/cd.img"
chmod 0711 "$work/ext4-state" # as tmpfiles.d makes /var/lib/slate: QEMU runs as its own user
cat >"$work/dom-pool.xml" <<XML
<domain type='qemu'><name>slate-pooluser-$$</name><memory unit='MiB'>32</memory>
<os><type arch='x86_64'>hvm</type></os><devices><disk type='file' device='cdrom'>
<source file='$work/ext4-state/pool/cd.img'/><target dev='hdc' bus='ide'/><readonly/></disk>
</devices></domain>
XML
virsh -q -c "$SLATE_TEST_URI" create "$work/dom-pool.xml" >/dev/null
on_exit destroy_quietly "slate-pooluser-$$"
expect_fail 1 "storage pool $work/ext4-state/pool stays mounted: 1 running domain (slate-pooluser-$$) uses it" \
    "$slated" --cleanup --state-dir "$work/ext4-state" --runtime-dir "$work/run"
mountpoint -q "$work/ext4-state/pool" || fail "slated --cleanup unmounted a pool a domain uses"
virsh -q -c "$SLATE_TEST_URI" destroy "slate-pooluser-$$" >/dev/null
rm -f "$work/ext4-state/pool/cd.img"
"$slated" --cleanup --state-dir "$work/ext4-state" --runtime-dir "$work/run" >"$work/out" ||
    fail "slated --cleanup: $(cat "$work/out")"
grep -q "^unmounted the storage pool $work/ext4-state/pool" "$work/out" || fail "slated --cleanup said: $(cat "$work/out")"
mountpoint -q "$work/ext4-state/pool" && fail "slated --cleanup left the pool mounted"
"$slated" --cleanup --state-dir "$work/ext4-state" --runtime-dir "$work/run" >"$work/out" ||
    fail "a second slated --cleanup: $(cat "$work/out")"
grep -q "^no storage pool is mounted" "$work/out" || fail "a second slated --cleanup said: $(cat "$work/out")"

# A full filesystem: a clear error, and nothing half-made left behind.
mnt=$(make_loop_fs xfs ws-full 300M)
start_daemon "$mnt/state"
s image import test "$test_image_dir/disk.img" >/dev/null
avail=$(df --output=avail -B1 "$mnt" | tail -1)
fallocate -l $((avail - (1 << 20))) "$mnt/filler" 2>/dev/null || fallocate -l $((avail - (2 << 20))) "$mnt/filler"
expect_fail 1 "full" s create big --home-size 4G
[ "$(s ls --json | jget workspaces)" = "[]" ] || fail "a half-made workspace is listed"
# (.home-templates is a cache of fresh homes; no half-made template may be left in it.)
ls -A "$mnt/state/workspaces" | grep -v '^\.\(macs\|locks\|home-templates\)' | grep -q . && fail "leftovers: $(ls -A "$mnt/state/workspaces")"
ls -A "$mnt/state/workspaces/.home-templates" 2>/dev/null | grep -q '^\.tmp' &&
    fail "a half-made home template: $(ls -A "$mnt/state/workspaces/.home-templates")"
rm -f "$mnt/filler"
s create big >/dev/null || fail "create after freeing space"
stop_slated

# kill -9 of slated in the middle of create and rm: after a restart, the old state or the new.
mnt=$(make_loop_fs btrfs ws-crash 1G)
start_daemon "$mnt/state"
s image import test "$test_image_dir/disk.img" >/dev/null
s create keep >/dev/null
stop_slated
for point in $(sed -n 's/^| `\(create:[a-z-]*\)`.*/\1/p' "$top_srcdir/doc/crash-points.md"); do
    start_daemon "$mnt/state" SLATE_CRASH_POINT="$point"
    s create crashy >/dev/null 2>&1 && fail "create survived crash point $point"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
    start_daemon "$mnt/state"
    names=$(s ls --json | python3 -c 'import json,sys; print(" ".join(w["name"] for w in json.load(sys.stdin)["workspaces"]))')
    case "$names" in
    "crashy keep" | keep) ;;
    *) fail "after a crash at $point: workspaces '$names'" ;;
    esac
    if [ "$names" = "crashy keep" ]; then
        s describe crashy --json >/dev/null || fail "crashy is listed but broken after $point"
        s rm crashy --yes >/dev/null
    fi
    stop_slated
    log "crash at $point: consistent ($names)"
done
for point in $(sed -n 's/^| `\(delete:[a-z-]*\)`.*/\1/p' "$top_srcdir/doc/crash-points.md"); do
    start_daemon "$mnt/state"
    s create doomed >/dev/null
    stop_slated
    start_daemon "$mnt/state" SLATE_CRASH_POINT="$point"
    s rm doomed --yes >/dev/null 2>&1 && fail "rm survived crash point $point"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
    start_daemon "$mnt/state"
    names=$(s ls --json | python3 -c 'import json,sys; print(" ".join(w["name"] for w in json.load(sys.stdin)["workspaces"]))')
    case "$names" in
    "doomed keep") s describe doomed --json >/dev/null && s rm doomed --yes >/dev/null ;;
    keep) ;;
    *) fail "after a crash at $point: workspaces '$names'" ;;
    esac
    [ "$(s describe keep --json | jget home_present)" = true ] || fail "crash at $point lost keep's home"
    stop_slated
    log "crash at $point: consistent ($names)"
done
echo "workspaces: all checks passed"
