#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# slate --host ssh://USER@HOST:PORT (slate(1), "REMOTE HOSTS"): a real sshd of the test's own on
# 127.0.0.1 and a free port, logging in a second local user who is in the socket's group and
# whose key is restricted to "slate system dial-stdio"; the client's ssh gets its options from
# SLATE_SSH. Over it: version, ls --json, create and start (a progress stream), exec with its
# exit status, 10 MB of stdin round-tripped intact, slate cp both ways, a PTY (exec -t, shell),
# the console; the remote user's own permissions (slated sees that uid; a user outside the group
# gets the permission-denied message through ssh); bad URLs; ssh failing (closed port, unknown
# user, no slate on the remote PATH) says so at once; no ssh or dial-stdio left behind.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

[ -x /usr/sbin/sshd ] || skip "sshd not found (apt-get install openssh-server)"
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null ||
    skip "ssh not found (apt-get install openssh-client)"
command -v script >/dev/null || skip "script not found (apt-get install bsdutils)"
ensure_libvirt
ensure_test_image

grp=slt-sg$$
user=slt-su$$     # in the socket's group
outsider=slt-so$$ # not in it
bare=slt-sb$$     # no slate on its PATH
ws=rs$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated
add_test_group "$grp"
add_test_user "$user" "$grp"
add_test_user "$outsider"
add_test_user "$bare" "$grp"
# sshd runs the command through the login shell and refuses a locked password ("!"); '*' is no
# password at all. The home is only where sshd changes directory.
mkdir -m 0755 "$work/home"
for u in "$user" "$outsider" "$bare"; do
    usermod -s /bin/sh -d "$work/home" -p '*' "$u"
done

mnt=$(make_loop_fs btrfs rssh 3G)
state=$mnt/state
start_slated -- --socket-group "$grp"
chmod 0755 "$work" "$work/run"
sock=$work/run/slated.sock
import_test_image

# ---- sshd of our own: its own host key, one authorized key for the three users ----
sshdir=$work/sshd
mkdir -m 0755 "$sshdir" "$sshdir/keys"
ssh-keygen -q -t ed25519 -N '' -f "$sshdir/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$sshdir/client_key"
for u in "$outsider" "$bare"; do
    install -m 0644 "$sshdir/client_key.pub" "$sshdir/keys/$u"
done
# $user's key can do nothing but reach slated, as slate(1), "REMOTE HOSTS", suggests.
printf 'restrict,command="slate system dial-stdio" %s\n' "$(cat "$sshdir/client_key.pub")" >"$sshdir/keys/$user"
chmod 0644 "$sshdir/keys/$user"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
closed=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The remote environment: this build's slate first on PATH, and the test's slated socket.
cat >"$sshdir/sshd_config" <<EOF
ListenAddress 127.0.0.1:$port
HostKey $sshdir/host_key
PidFile none
AuthorizedKeysFile $sshdir/keys/%u
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers $user $outsider $bare
SetEnv SLATE_SOCKET=$sock PATH=$top_builddir:/usr/bin:/bin
Match User $bare
    SetEnv SLATE_SOCKET=$sock PATH=/usr/bin:/bin
EOF
if [ ! -d /run/sshd ]; then # sshd's privilege separation directory (the package's tmpfiles.d)
    mkdir -m 0755 /run/sshd
    on_exit rmdir /run/sshd
fi
/usr/sbin/sshd -t -f "$sshdir/sshd_config" || fail "sshd rejects the test configuration"
/usr/sbin/sshd -D -e -f "$sshdir/sshd_config" 2>>"$work/sshd.log" &
sshd_pid=$!
on_exit stop_bg sshd_pid
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$sshd_pid" 2>/dev/null || { cat "$work/sshd.log"; fail "sshd died"; }
    sleep 0.1
done

# The client's ssh: slate runs $SLATE_SSH with its arguments appended (slate(1), ENVIRONMENT).
cat >"$sshdir/ssh_config" <<EOF
Host *
    IdentityFile $sshdir/client_key
    IdentitiesOnly yes
    UserKnownHostsFile $sshdir/known_hosts
    StrictHostKeyChecking accept-new
    BatchMode yes
    LogLevel ERROR
EOF
export SLATE_SSH="ssh -F $sshdir/ssh_config"
url=ssh://$user@127.0.0.1:$port
r() { "$slate" --host "$url" "$@"; }

# ---- the API through ssh ----
r version >"$work/out" 2>"$work/err" || fail "version over ssh: $(cat "$work/err"; tail -5 "$work/sshd.log")"
grep -q "^daemon: slated .*$url" "$work/out" || fail "version: $(cat "$work/out")"
[ "$(r --json version | jget host)" = "$url" ] || fail "version --json names no host"
[ "$(r ls --json | jget workspaces)" = "[]" ] || fail "ls --json: $(r ls --json)"
# SLATE_HOST does the same; --socket on the command line beats it.
SLATE_HOST=$url "$slate" version | grep -q "$url" || fail "SLATE_HOST"
SLATE_HOST=$url "$slate" --socket "$sock" version | grep -q "$sock)" || fail "--socket with SLATE_HOST"
# slated sees the remote user: dial-stdio connects as whoever ssh logged in (raw HTTP/1.0, so
# the reply ends with the connection: the half-close path too).
printf 'GET /v1/version HTTP/1.0\r\nHost: slated\r\n\r\n' |
    $SLATE_SSH -p "$port" -l "$user" 127.0.0.1 slate system dial-stdio >"$work/raw" ||
    fail "dial-stdio by hand"
uid=$(sed '1,/^\r$/d' "$work/raw" | jget caller.uid)
[ "$uid" = "$(id -u "$user")" ] || fail "slated saw uid $uid through ssh, want $(id -u "$user")"

# create and start (a stream of progress events), exec and its exit status.
r create $ws --memory 512 --cpus 1 --home-size 1G >/dev/null 2>"$work/err" ||
    fail "create over ssh: $(cat "$work/err")"
r start $ws >"$work/out" 2>"$work/err" || fail "start over ssh: $(cat "$work/err")"
grep -q "^\[" "$work/err" || fail "start over ssh showed no progress: $(cat "$work/err")"
s ls --json | python3 -c 'import json,sys; w=[w for w in json.load(sys.stdin)["workspaces"] if w["name"]==sys.argv[1]]; assert w and w[0]["owner"]==int(sys.argv[2]), w' \
    "$ws" "$(id -u "$user")" || fail "the workspace is not the remote user's: $(s ls --json)"
[ "$(r exec $ws -- echo hello)" = hello ] || fail "exec -- echo over ssh"
want_status 0 r exec $ws -- true
want_status 3 r exec $ws -- sh -c 'exit 3'
want_status 137 r exec $ws -- sh -c 'kill -9 $$'
r exec $ws -- sh -c 'echo out; echo err >&2' >"$work/out" 2>"$work/err"
[ "$(cat "$work/out"):$(cat "$work/err")" = out:err ] || fail "stdout/stderr apart: $(cat "$work/out" "$work/err")"

# 10 MB of stdin, through and back, intact.
head -c 10485760 /dev/urandom >"$work/in"
want=$(sha256sum <"$work/in" | cut -d' ' -f1)
got=$(r exec -i $ws -- cat <"$work/in" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "exec -i cat: sha256 $got, want $want"
got=$(r exec -i $ws -- sha256sum <"$work/in" | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "sha256sum in the guest: $got, want $want"

# slate cp both ways, on the same connections (the host side here is root's, the copy in the
# guest the workspace user's).
r cp -q "$work/in" $ws:in.bin || fail "cp into the guest over ssh: $(cat "$work/err" 2>/dev/null)"
mkdir "$work/back"
r cp -q $ws:in.bin "$work/back/" || fail "cp out of the guest over ssh"
[ "$(sha256sum <"$work/back/in.bin" | cut -d' ' -f1)" = "$want" ] || fail "cp over ssh: the copy differs"

# A PTY: exec -t sees the terminal's size; shell runs what is typed and exits with its status.
out=$(script -qec "stty rows 33 cols 101; $slate --host $url exec -t $ws -- stty size" /dev/null </dev/null | tr -d '\r')
case "$out" in *"33 101"*) ;; *) fail "exec -t over ssh: '$out'" ;; esac
rc=0
{ sleep 3; printf 'echo shell-$((6*7))\nexit 5\n'; sleep 10; } |
    timeout 60 script -qefc "$slate --host $url shell $ws" /dev/null >"$work/shell.out" 2>&1 || rc=$?
grep -q "^shell-42" <(tr -d '\r' <"$work/shell.out") || fail "shell over ssh: $(cat "$work/shell.out")"
[ "$rc" = 5 ] || fail "shell over ssh exited $rc, want 5"
# The console, without a terminal: what is typed goes in, output comes back.
out=$({ sleep 0.3; printf '\necho console-$((6*7))\n'; sleep 1.5; } | timeout 30 "$slate" --host "$url" console $ws | tr -d '\r') ||
    fail "console over ssh: $out"
grep -q "^console-42" <<<"$out" || fail "console over ssh: $out"

# ---- the remote user's own permissions ----
# Outside the socket's group: slated's socket refuses them, and they are told why, through ssh.
expect_fail --slate-form 1 "is not in group $grp" "$slate" --host "ssh://$outsider@127.0.0.1:$port" ls
grep -q "ssh exited 1: 'slate system dial-stdio' failed on the remote host" "$work/err" ||
    fail "outsider: $(cat "$work/err")"
# $user sees the workspace they made; $bare, in the same group, does not (it is $user's): asked
# through a local setpriv, since $bare cannot run slate over ssh.
[ "$(r ls --json | jget workspaces.0.name)" = $ws ] || fail "ls over ssh lacks $ws"
[ "$(as_user "$bare" "$slate" --socket "$sock" ls --json | jget workspaces)" = "[]" ] ||
    fail "another member of $grp sees $user's workspace"

# ---- bad URLs: usage errors, before any ssh runs ----
for bad in "tcp://127.0.0.1:$port" "ssh://127.0.0.1:$port/path" "ssh://-oProxyCommand=x" \
    "ssh://$user@-p1" "ssh://::1" "ssh://[::1" "ssh://u:pw@h" "ssh://h:0" "ssh://h:65536" \
    "ssh://a@b@c" "ssh://" "ssh://h x"; do
    expect_fail 2 "invalid --host" "$slate" --host "$bad" version
done
expect_fail 2 "exclude each other" "$slate" --host "$url" ls --socket "$sock"
SLATE_HOST=nonsense expect_fail nonzero "invalid SLATE_HOST 'nonsense'" "$slate" version

# ---- ssh failing: a clear error at once, never a hang ----
t0=$SECONDS
expect_fail 1 "cannot reach slated on ssh://$user@127.0.0.1:$closed: ssh exited 255" \
    timeout 20 "$slate" --host "ssh://$user@127.0.0.1:$closed" ls
expect_fail 1 "ssh exited 255" timeout 20 "$slate" --host "ssh://nosuch$$@127.0.0.1:$port" ls
expect_fail 1 "ssh exited 127: the remote host has no 'slate' command" \
    timeout 20 "$slate" --host "ssh://$bare@127.0.0.1:$port" exec $ws -- true
grep -q "slate: .*not found" "$work/err" || fail "the remote shell's message did not come through: $(cat "$work/err")"
SLATE_SSH=/nonexistent/ssh expect_fail 1 "ssh exited 127" timeout 20 "$slate" --host "$url" ls
[ $((SECONDS - t0)) -lt 20 ] || fail "the ssh failures took $((SECONDS - t0)) s"

# Done: stop and delete over ssh; nothing of the remote user's is left running afterwards (each
# ssh reaped, each dial-stdio ended with its connection).
r stop $ws >/dev/null
r rm $ws --yes >/dev/null
# (sshd reaps its per-login children itself, a moment later: zombies are not ours.)
for _ in $(seq 50); do
    left=$(ps -u "$user" -o pid=,stat=,args= | awk '$2 !~ /^Z/' || true)
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] || fail "processes of $user left: $left"
left=$(pgrep -f "ssh -F $sshdir/ssh_config" -a || true)
[ -z "$left" ] || fail "ssh clients left: $left"
