#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck disable=SC2154 # top_builddir, test_tmpdir, test_image_dir: run-one and lib.sh
# The sign-only SSH agent end to end, through a private slated and the test image under TCG:
#  * slate create --generate-ssh-key, slate ssh-key generate/show/import (a passphrase from
#    --passphrase-file, a refusal without a terminal, a wrong one, a duplicate, not a key),
#    describe's ssh_keys, keys sealed at rest (no private bytes in the state directory);
#  * wipe-home discards the keys (and the agent forgets them), rm removes everything;
#  * in the guest, over the channel: ssh-add -L lists exactly the workspace's keys,
#    ssh-keygen -Y sign with each (verified on the host), ssh-add / -D / -x refused, the user's
#    own host agent (in slated's environment) never shows; every signature in the audit trail;
#  * slated killed with -9 and started again: imported keys sign again (a fresh private
#    ssh-agent from the sealed keys) and the old one is gone;
#  * afterwards no private key bytes in disk.img or home.img.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image
for t in ssh-add ssh-keygen ssh-agent openssl; do
    command -v "$t" >/dev/null || skip "$t not found on the host (apt-get install openssh-client openssl)"
done

serve=$top_builddir/tests/unit/agent-serve
[ -x "$serve" ] || make -s -C "$top_builddir" tests/unit/agent-serve >/dev/null
ws=sa$$
user_agent_pid=
# The user's own agent is in slated's environment: it must never reach a guest.
start_daemon() { start_slated SSH_AUTH_SOCK="$work/user.sock"; }
g() { s exec "$ws" -- env SSH_AUTH_SOCK=/run/slate/ssh-agent.sock "$@"; }
blob() { cut -d' ' -f1,2 "$@"; }
on_exit destroy_domains "slate-$ws"
on_exit stop_slated
# (Not a child of ours: stop_bg only signals it.)
on_exit stop_bg user_agent_pid

eval "$(ssh-agent -s -a "$work/user.sock")" >/dev/null
# shellcheck disable=SC2034 # stop_bg reads it
user_agent_pid=$SSH_AGENT_PID
unset SSH_AUTH_SOCK SSH_AGENT_PID
ssh-keygen -q -t ed25519 -N '' -C user-own -f "$work/userkey"
SSH_AUTH_SOCK=$work/user.sock ssh-add -q "$work/userkey"

mnt=$(make_loop_fs btrfs sshagent 3G)
state=$mnt/state
start_daemon
import_test_image
wsdir=$state/workspaces/$ws

log "create --generate-ssh-key, ssh-key show/generate, describe"
s create "$ws" --home-size 256M --generate-ssh-key >"$work/create.out" 2>"$work/err" ||
    fail "create --generate-ssh-key: $(cat "$work/err")"
grep -q "^ssh-ed25519 AAAA[^ ]* slate:$ws@" "$work/create.out" || fail "create printed: $(cat "$work/create.out")"
s ssh-key show "$ws" >"$work/show.out"
[ "$(blob "$work/show.out")" = "$(grep ^ssh-ed25519 "$work/create.out" | cut -d' ' -f1,2)" ] ||
    fail "show differs from what create printed"
[ "$(s ssh-key show "$ws" --json | jget keys.0.fingerprint)" = \
    "$(ssh-keygen -lf "$work/show.out" | cut -d' ' -f2)" ] || fail "fingerprint differs from ssh-keygen -l"
[ "$(s describe "$ws" --json | jget ssh_keys.0.public_key)" = "$(cat "$work/show.out")" ] ||
    fail "describe's ssh_keys"
expect_fail nonzero "has a generated SSH key already" s ssh-key generate "$ws" </dev/null
[ "$(stat -c %a "$wsdir/ssh")" = 700 ] || fail "ssh/ is not 0700"

log "wipe-home discards the key pair"
s wipe-home "$ws" --yes >/dev/null
[ ! -e "$wsdir/ssh" ] || fail "wipe-home left $wsdir/ssh"
expect_fail nonzero "no SSH key" s ssh-key show "$ws" </dev/null
[ "$(s describe "$ws" --json | jget ssh_keys)" = "[]" ] || fail "describe still lists keys"
s ssh-key generate "$ws" >"$work/regen.pub"
[ "$(blob "$work/regen.pub")" != "$(blob "$work/show.out")" ] || fail "a new key is the old key"
s wipe-home "$ws" --yes >/dev/null

log "a managed key of a known seed (for the residue scan), imported ECDSA and RSA keys"
seed=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
"$serve" --state "$state" --workspaces "$state/workspaces" generate "$ws" --seed-hex "$seed" \
    >"$work/managed.pub"
ssh-keygen -q -t ecdsa -m PEM -N 'pass phrase' -C ec-key -f "$work/ec"
ssh-keygen -q -t rsa -b 3072 -m PEM -N '' -C rsa-key -f "$work/rsa"
printf 'pass phrase\n' >"$work/pass"
printf 'nope\n' >"$work/wrong"
# No terminal to ask on (setsid: no controlling terminal), and no --passphrase-file.
rc=$(status setsid -w "$slate" --socket "$work/run/slated.sock" ssh-key import "$ws" "$work/ec" </dev/null)
if [ "$rc" != 1 ] || ! grep -q "passphrase-file" "$work/err"; then
    fail "import without a passphrase: $rc $(cat "$work/err")"
fi
expect_fail nonzero "does not open" s ssh-key import "$ws" "$work/ec" --passphrase-file "$work/wrong" </dev/null
s ssh-key import "$ws" "$work/ec" --passphrase-file "$work/pass" >"$work/ec.line"
[ "$(blob "$work/ec.line")" = "$(blob "$work/ec.pub")" ] || fail "imported ECDSA line"
s ssh-key import "$ws" - <"$work/rsa" >"$work/rsa.line"
[ "$(blob "$work/rsa.line")" = "$(blob "$work/rsa.pub")" ] || fail "imported RSA line"
expect_fail nonzero "has this key already" s ssh-key import "$ws" "$work/rsa" </dev/null
# On a terminal the passphrase is asked for, not echoed (the key is there already by now: the
# answer after a right passphrase is "has this key already").
if command -v script >/dev/null; then
    (sleep 2; printf 'pass phrase\n') |
        script -qec "'$slate' --socket '$work/run/slated.sock' ssh-key import $ws '$work/ec'" \
            /dev/null >"$work/tty.out" 2>&1 || true
    if ! grep -q "Enter passphrase" "$work/tty.out" ||
        ! grep -q "has this key already" "$work/tty.out"; then
        fail "the passphrase from the terminal: $(cat "$work/tty.out")"
    fi
    ! grep -q "pass phrase" "$work/tty.out" || fail "the passphrase was echoed"
fi
expect_fail nonzero "not a private key" s ssh-key import "$ws" /etc/hostname </dev/null
cat "$work/managed.pub" "$work/ec.pub" "$work/rsa.pub" >"$work/want"
s ssh-key show "$ws" >"$work/show3"
diff <(blob "$work/show3") <(blob "$work/want") >&2 || fail "show does not list the three keys"
[ "$(SSH_AUTH_SOCK=$work/user.sock ssh-add -L | wc -l)" = 1 ] || fail "a key landed in the user's agent"

# The private numbers of every key, to look for where they must not be.
python3 - "$work" "$seed" <<'EOF'
import re, subprocess, sys
work, seed = sys.argv[1], sys.argv[2]
def priv(args, field):
    out = subprocess.run(["openssl"] + args, capture_output=True, text=True, check=True).stdout
    m = re.search(field + r":\s*\n((?:\s+[0-9a-f:]+\n)+)", out)
    return bytes.fromhex(re.sub(r"[\s:]", "", m.group(1)))
secrets = {
    "managed-seed": bytes.fromhex(seed),
    "ecdsa-d": priv(["ec", "-in", work + "/ec", "-passin", "file:" + work + "/pass", "-text", "-noout"], "priv"),
    "rsa-d": priv(["rsa", "-in", work + "/rsa", "-text", "-noout"], "privateExponent"),
    "rsa-p": priv(["rsa", "-in", work + "/rsa", "-text", "-noout"], "prime1"),
}
with open(work + "/secrets.hex", "w") as f:
    for k, v in secrets.items():
        v = v.lstrip(b"\0")
        f.write("%s %s\n" % (k, v[:32].hex()))
EOF
scan() { # scan FILE...: fails when one holds a private key's bytes or a key file's text
    python3 - "$work/secrets.hex" "$work/ec" "$work/rsa" "$@" <<'EOF'
import mmap, sys
needles = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    needles[k] = bytes.fromhex(v)
for keyfile in sys.argv[2:4]:
    lines = [l for l in open(keyfile).read().splitlines() if not l.startswith("-") and len(l) > 40]
    needles[keyfile + " text"] = lines[len(lines) // 2].encode()
bad = []
for path in sys.argv[4:]:
    with open(path, "rb") as f:
        try:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            continue
        for k, v in needles.items():
            if m.find(v) >= 0:
                bad.append("%s in %s" % (k, path))
if bad:
    sys.exit("private key bytes found: " + ", ".join(bad))
EOF
}
# The scan itself sees what it looks for: the RSA key as DER, the seed, the key file's text.
openssl rsa -in "$work/rsa" -outform DER -out "$work/rsa.der" 2>/dev/null
python3 -c 'import sys; open(sys.argv[2], "wb").write(bytes.fromhex(sys.argv[1]))' "$seed" "$work/seed.bin"
for f in "$work/rsa.der" "$work/seed.bin" "$work/rsa"; do
    ! scan "$f" 2>/dev/null || fail "the residue scan does not see the key bytes in $f"
done
log "sealed at rest: nothing private in the state directory"
mapfile -t state_files < <(find "$state" -type f -size -64M)
scan "${state_files[@]}" || fail "the state directory holds private key bytes"

log "in the guest: ssh-add -L, ssh-keygen -Y sign through the channel"
s start "$ws" >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"
if ! s exec "$ws" -- sh -c 'command -v ssh-add && command -v ssh-keygen' >/dev/null 2>&1; then
    fail "the test image has no ssh-add/ssh-keygen (TEST_IMAGE_PACKAGES needs openssh-client)"
fi
g ssh-add -L >"$work/guest.list" 2>"$work/err" || fail "ssh-add -L in the guest: $(cat "$work/err")"
diff <(blob "$work/guest.list") <(blob "$work/want") >&2 || fail "the guest's ssh-add -L is not the workspace's keys"
grep -q user-own "$work/guest.list" && fail "the user's own agent shows in the guest"
echo "a message signed in the guest" >"$work/msg"
s exec -i "$ws" -- sh -c 'cat >/tmp/msg' <"$work/msg"
for k in managed ec rsa; do
    s exec -i "$ws" -- sh -c "cat >/tmp/$k.pub" <"$work/$k.pub"
    g ssh-keygen -q -Y sign -f "/tmp/$k.pub" -n git /tmp/msg >/dev/null 2>"$work/err" ||
        fail "ssh-keygen -Y sign with $k in the guest: $(cat "$work/err")"
    s exec "$ws" -- cat /tmp/msg.sig >"$work/$k.sig"
    s exec "$ws" -- rm -f /tmp/msg.sig
    printf 'signer %s\n' "$(blob "$work/$k.pub")" >"$work/allowed"
    ssh-keygen -Y verify -f "$work/allowed" -I signer -n git -s "$work/$k.sig" <"$work/msg" \
        >/dev/null || fail "the $k signature made in the guest does not verify"
done
log "the guest's memory after signing with every key: public keys, no private key bytes"
virsh -q -c "$SLATE_TEST_URI" dump --memory-only "slate-$ws" "$work/mem.dump" >/dev/null ||
    fail "virsh dump failed"
# The dump is first shown to hold what went through the channel (a public key blob).
grep -qaF -- "$(blob "$work/ec.pub")" "$work/mem.dump" ||
    fail "the memory scan does not even find a public key"
scan "$work/mem.dump" || fail "private key bytes in the guest's memory"
rm -f "$work/mem.dump"
log "in the guest: adding, removing, locking refused"
s exec -i "$ws" -- sh -c 'umask 077; cat >/tmp/userkey' <"$work/userkey"
[ "$(status g ssh-add /tmp/userkey </dev/null)" != 0 ] || fail "ssh-add KEY in the guest was accepted"
[ "$(status g ssh-add -D </dev/null)" != 0 ] || fail "ssh-add -D in the guest was accepted"
s exec -i "$ws" -- sh -c 'printf "#!/bin/sh\necho pw\n" >/tmp/askpass; chmod +x /tmp/askpass' </dev/null
[ "$(status g SSH_ASKPASS=/tmp/askpass SSH_ASKPASS_REQUIRE=force DISPLAY=:0 ssh-add -x </dev/null)" != 0 ] ||
    fail "ssh-add -x in the guest was accepted"
g ssh-add -L >"$work/guest.list2"
diff "$work/guest.list" "$work/guest.list2" >&2 || fail "refused requests changed the keys"
s exec "$ws" -- rm -f /tmp/userkey

log "in-guest latency: signatures through the channel"
# One ssh-keygen signing 1 file and one signing 100: the difference is 99 round trips through
# the guest's socket, the channel and slated's agent, without process starts.
# shellcheck disable=SC2016 # expanded in the guest
s exec "$ws" -- sh -c 'for i in $(seq 0 100); do echo "$i" >/tmp/m$i; done'
files=$(seq -f /tmp/m%g 1 100 | tr '\n' ' ')
t0=${EPOCHREALTIME/./}
g ssh-keygen -q -Y sign -f /tmp/managed.pub -n git /tmp/m0 >/dev/null
t1=${EPOCHREALTIME/./}
# shellcheck disable=SC2086 # one argument per file
g ssh-keygen -q -Y sign -f /tmp/managed.pub -n git $files >/dev/null
t2=${EPOCHREALTIME/./}
s exec "$ws" -- sh -c 'rm -f /tmp/m[0-9]*'
[ "$(grep -c '"ssh-sign"' "$wsdir/audit.jsonl")" -ge 104 ] || fail "the 101 signatures are not all audited"
log "in-guest (TCG): one ssh-keygen -Y sign $(((t1 - t0) / 1000)) ms; each further signature in the same process $(((t2 - t1 - (t1 - t0)) / 99 / 1000)).$(((t2 - t1 - (t1 - t0)) / 99 % 1000 / 100)) ms"

log "every signature is in the audit trail"
python3 - "$wsdir/audit.jsonl" "$(ssh-keygen -lf "$work/rsa.pub" | cut -d' ' -f2)" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"ssh-sign"' in l]
assert len(ev) >= 3 + 101, len(ev)
for e in ev:
    assert e["type"] == "ssh-sign" and e["fingerprint"].startswith("SHA256:") and e["bytes"] > 0, e
    assert "a message signed" not in json.dumps(e)
assert any(e["fingerprint"] == sys.argv[2] and e["flags"] == 4 and e["algorithm"] == "rsa-sha2-512" for e in ev)
EOF
if s trace "$ws" --json >"$work/trace.json" 2>/dev/null; then
    grep -q ssh-sign "$work/trace.json" || fail "slate trace does not show the signatures"
fi

log "slated killed (-9) and started again: imported keys sign again"
# The private ssh-agent: the child of the shell (now cat) that slated started.
old_agent=
for c in $(pgrep -P "$daemon_pid" -x cat || true); do
    old_agent=$(pgrep -P "$c" | head -n 1 || true)
done
[ -n "$old_agent" ] || fail "no private ssh-agent ran for the imported keys"
alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null || true
daemon_pid=
start_daemon
for _ in $(seq 100); do s exec "$ws" -- true >/dev/null 2>&1 && break; sleep 0.2; done
g ssh-keygen -q -Y sign -f /tmp/rsa.pub -n git /tmp/msg >/dev/null 2>"$work/err" ||
    fail "rsa sign after restart: $(cat "$work/err")"
s exec "$ws" -- rm -f /tmp/msg.sig
# The old private agent goes by itself (its parent's pipe closed when slated died).
for _ in $(seq 60); do alive "$old_agent" || break; sleep 0.5; done
! alive "$old_agent" || fail "the private ssh-agent $old_agent outlived slated"

log "residue: no private key bytes in disk.img or home.img"
s stop "$ws" --force >/dev/null
scan "$wsdir/disk.img" "$wsdir/home.img" || fail "private key bytes in the workspace's images"

log "wipe-home discards the generated key, keeps the imported ones"
s wipe-home "$ws" --yes >/dev/null
s describe "$ws" --json | python3 -c 'import json,sys
k = sorted(x["kind"] for x in json.load(sys.stdin)["ssh_keys"])
sys.exit(0 if k == ["imported", "imported"] else "ssh_keys after wipe-home: %s" % k)' ||
    fail "wipe-home: not the two imported keys"
[ ! -e "$wsdir/ssh/managed.key" ] || fail "wipe-home left the generated key's sealed file"
[ "$(find "$wsdir/ssh" -type f | wc -l)" = 3 ] || fail "ssh/ after wipe-home: $(ls "$wsdir/ssh")"
s start "$ws" >/dev/null 2>"$work/err" || fail "start after wipe-home: $(cat "$work/err")"
g ssh-add -L >"$work/guest.list" 2>"$work/err" || fail "ssh-add -L after wipe-home: $(cat "$work/err")"
diff <(blob "$work/guest.list" | sort) <(cat "$work/ec.pub" "$work/rsa.pub" | blob | sort) >&2 ||
    fail "the guest's keys after wipe-home are not the imported ones"
s stop "$ws" --force >/dev/null
s ssh-key generate "$ws" >/dev/null || fail "a new key after wipe-home"

log "rm removes the keys and the private agent"
s rm "$ws" --yes >/dev/null
[ ! -e "$wsdir" ] || fail "rm left $wsdir"
[ ! -e "$work/run/ssh-agent/$ws" ] || fail "rm left the private agent's directory"
