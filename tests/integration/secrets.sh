#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Secrets through a private slated and the real client, without a VM: `secret set` reading the
# value from stdin (never argv) and printing placeholders of the right shape, `secret ls` and
# `describe` showing names, kinds, hosts and placeholders but never a value (also with --json),
# host normalisation and refusals, global secrets merged under a workspace's own (which override),
# placeholders the same after a restart of slated, vault files with no plaintext (0600, the global
# directory 0700), a vault copied into another workspace's directory refused, wipe keeping the
# vault and rm taking it, another user kept out, nothing in slated's log, and clear errors for a
# master key open to others or damaged.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt # describe asks libvirt whether the domain runs

on_exit stop_slated
# no_values FILE...: none of the real values appears in the files.
no_values() {
    local f v
    for f in "$@"; do
        for v in "${values[@]}"; do
            if grep -qF -- "$v" "$f"; then fail "a real value is in $f"; fi
        done
    done
}

# Made-up values of each shape; never printed by the test itself.
anthropic=sk-ant-api03-$(head -c 70 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | head -c 93)AA
github_global=ghp_$(head -c 60 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | head -c 36)
github_ws=ghp_$(head -c 60 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | head -c 36)
aws_id=AKIA$(head -c 40 /dev/urandom | base32 -w0 | tr -dc 'A-Z2-7' | head -c 16)
aws_secret=$(head -c 60 /dev/urandom | base64 -w0 | head -c 40)
aws_token=$(head -c 200 /dev/urandom | base64 -w0)
generic=generic-$(head -c 24 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9')
values=("$anthropic" "$github_global" "$github_ws" "$aws_id" "$aws_secret" "$aws_token" "$generic")

mnt=$(make_loop_fs btrfs secrets 1G)
state=$mnt/state
start_slated
truncate -s 64M "$work/fake-disk.img"
s image import test "$work/fake-disk.img" >/dev/null
s create ws1 --home-size 64M >/dev/null
s create ws2 --home-size 64M >/dev/null
wsdir=$(dirname "$(find "$state" -path '*/ws1/workspace.json' | head -1)")
[ -d "$wsdir" ] || fail "workspace directory of ws1 not found"
ws2dir=$(dirname "$wsdir")/ws2

log "set: value from stdin, placeholder printed"
ph=$(printf '%s\n' "$anthropic" | s secret set ws1 ANTHROPIC_API_KEY --kind anthropic --host API.Anthropic.COM.)
[[ $ph == sk-ant-api03-slate* ]] || fail "anthropic placeholder shape: $ph"
[ ${#ph} = ${#anthropic} ] || fail "anthropic placeholder length ${#ph}, want ${#anthropic}"
[[ $ph == *AA ]] || fail "anthropic placeholder does not end in AA"
[ "$ph" != "$anthropic" ] || fail "placeholder equals the value"
# The same value again: the same placeholder (deterministic), reported as replaced.
printf '%s' "$anthropic" | s --json secret set ws1 ANTHROPIC_API_KEY --kind anthropic --host api.anthropic.com >"$work/set.json"
no_values "$work/set.json"
[ "$(jget placeholders.value <"$work/set.json")" = "$ph" ] || fail "placeholder not deterministic"
[ "$(jget replaced <"$work/set.json")" = true ] || fail "second set not reported as replaced"
[ "$(jget hosts.0 <"$work/set.json")" = api.anthropic.com ] || fail "host not normalised"

# Bound narrowly, to the one endpoint it is for: amazonaws.com would also bind names other
# people own (doc/secrets.md "Broad bindings"), and say so.
# shellcheck disable=SC2088 # the guest's ~, not ours
printf '%s %s %s\n' "$aws_id" "$aws_secret" "$aws_token" |
    s secret set ws1 AWS --kind aws --region us-east-1 --service sts --file '~/.aws/credentials' \
        >"$work/aws.out" 2>"$work/aws.err"
[ ! -s "$work/aws.err" ] || fail "a narrow aws binding warned: $(cat "$work/aws.err")"
grep -q '^access-key-id AKIASLATE[A-Z2-7]\{11\}$' "$work/aws.out" || fail "aws key id: $(cat "$work/aws.out")"
grep -q '^secret-access-key slate[A-Za-z0-9]\{35\}$' "$work/aws.out" || fail "aws secret: $(cat "$work/aws.out")"
grep -q '^session-token slate' "$work/aws.out" || fail "aws session token missing"
printf '%s' "$generic" | s secret set ws1 DB_PASSWORD --host 'bücher.example' --env DB_PASS >/dev/null

# --file ~/.git-credentials unquoted: the host's shell hands over the caller's home.
# Under /root the workspace user could not read it in the guest: refused, naming the quoted form.
# Under another host home: set, with a warning naming the likely intent.
setfile() { printf 'not-a-real-token' | HOME=$1 "$slate" --socket "$work/run/slated.sock" secret set ws1 "$2" --host github.com --file "$3"; }
expect_fail --slate-form 2 "Quote it: --file '~/.git-credentials'" setfile /root GITC /root/.git-credentials
s secret ls ws1 | grep -q GITC && fail "a --file under /root was stored"
setfile /home/alice GITC /home/alice/.git-credentials >/dev/null 2>"$work/err" || fail "--file under another home: $(cat "$work/err")"
grep -q "quote it: --file '~/.git-credentials'" "$work/err" || fail "no warning for a --file under the host home: $(cat "$work/err")"
s secret rm ws1 GITC >/dev/null

log "global secrets, overridden by the workspace's own"
gph=$(printf '%s' "$github_global" | s secret set --global GH_TOKEN --kind github --host github.com)
[[ $gph == ghp_slate* ]] && [ ${#gph} = 40 ] || fail "github placeholder shape: $gph"
python3 - "$gph" <<'EOF' || fail "github placeholder fails GitHub's checksum"
import sys, zlib
t = sys.argv[1]; A = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
p = t.split("_")[-1]; v = 0
for c in p[-6:]: v = v * 62 + A.index(c)
sys.exit(0 if v == zlib.crc32(p[:-6].encode()) else 1)
EOF
s --json secret ls ws1 >"$work/ls.json"
no_values "$work/ls.json"
python3 - "$work/ls.json" "$gph" <<'EOF' || fail "merged list wrong: $(cat "$work/ls.json")"
import json, sys
d = json.load(open(sys.argv[1])); by = {s["key"]: s for s in d["secrets"]}
assert set(by) == {"ANTHROPIC_API_KEY", "AWS", "DB_PASSWORD", "GH_TOKEN"}, by.keys()
assert by["GH_TOKEN"]["scope"] == "global" and by["GH_TOKEN"]["placeholders"]["value"] == sys.argv[2]
assert by["DB_PASSWORD"]["hosts"] == ["xn--bcher-kva.example"], by["DB_PASSWORD"]
assert by["DB_PASSWORD"]["env"] == "DB_PASS"
assert by["AWS"]["file"] == "~/.aws/credentials" and len(by["AWS"]["placeholders"]) == 3
assert by["AWS"]["hosts"] == ["sts.us-east-1.amazonaws.com"], by["AWS"]
EOF
wph=$(printf '%s' "$github_ws" | s secret set ws1 GH_TOKEN --kind github --host github.com)
[ "$wph" != "$gph" ] || fail "workspace GH_TOKEN has the global placeholder"
s --json secret ls ws1 >"$work/ls.json"
python3 - "$work/ls.json" "$wph" <<'EOF' || fail "override not seen: $(cat "$work/ls.json")"
import json, sys
d = json.load(open(sys.argv[1])); gh = [s for s in d["secrets"] if s["key"] == "GH_TOKEN"]
assert len(gh) == 1 and gh[0]["scope"] == "workspace" and gh[0]["placeholders"]["value"] == sys.argv[2], gh
EOF
[ "$(s --json secret ls | jget secrets.0.key)" = GH_TOKEN ] || fail "global list"
[ "$(s --json secret ls ws2 | jget secrets.0.scope)" = global ] || fail "ws2 does not see the global secret"
s secret ls ws1 >"$work/ls.txt"
no_values "$work/ls.txt"
grep -q "^ANTHROPIC_API_KEY .*anthropic .*workspace .*api.anthropic.com .*\$ANTHROPIC_API_KEY .*$ph" "$work/ls.txt" ||
    fail "secret ls text: $(cat "$work/ls.txt")"

log "describe: names, kinds and hosts, never values"
s describe ws1 >"$work/describe.txt"
s --json describe ws1 >"$work/describe.json"
no_values "$work/describe.txt" "$work/describe.json"
grep -q "ANTHROPIC_API_KEY (anthropic, workspace) -> api.anthropic.com" "$work/describe.txt" ||
    fail "describe does not show the secret: $(cat "$work/describe.txt")"
grep -qF "$ph" "$work/describe.txt" "$work/describe.json" && fail "describe shows a placeholder"

log "refusals"
expect_fail --slate-form 1 "wildcard" s secret set ws1 K --host '*.example.com' < <(printf 'long-enough-value')
expect_fail --slate-form 1 "empty" s secret set ws1 K --host 'a..example' < <(printf 'long-enough-value')
expect_fail --slate-form 1 "port does not belong" s secret set ws1 K --host 'example.com:443' < <(printf 'long-enough-value')
expect_fail --slate-form 1 "standard input is empty" s secret set ws1 K --host a.example </dev/null
expect_fail --slate-form 1 "standard input is empty" s secret set ws1 K --host a.example < <(printf '\n')
expect_fail --slate-form 1 "shorter than" s secret set ws1 K --host a.example < <(printf 'short')
expect_fail --slate-form 1 "ACCESS_KEY_ID SECRET_ACCESS_KEY" s secret set ws1 K --kind aws --host a.example < <(printf '%s' "$aws_id")
expect_fail --slate-form 2 "unexpected\|give (NAME|--global) KEY" s secret set ws1 K "$generic" --host a.example
grep -qF -- "$generic" "$work/err" && fail "a usage error echoed the value"
expect_fail --slate-form 2 "--kind nosuch" s secret set ws1 K --kind nosuch --host a.example </dev/null
expect_fail --slate-form 2 "with --host" s secret set ws1 K </dev/null
expect_fail --slate-form 1 "no workspace named 'nope'" s secret set nope K --host a.example < <(printf 'long-enough-value')
expect_fail --slate-form 1 "no secret named" s secret rm ws1 NOPE
expect_fail --slate-form 1 "no workspace named" s secret ls nope

log "at rest: sealed, 0600, no plaintext; the global directory 0700"
vault=$wsdir/secrets.enc
gvault=$state/secrets/global-0.enc
[ -f "$vault" ] && [ -f "$gvault" ] || fail "vault files missing"
[ "$(stat -c %a "$vault")" = 600 ] && [ "$(stat -c %a "$gvault")" = 600 ] || fail "vault modes"
[ "$(stat -c %a "$state/secrets")" = 700 ] || fail "global vault directory mode"
no_values "$vault" "$gvault"
for word in ANTHROPIC_API_KEY GH_TOKEN api.anthropic.com SLVAULT1; do
    grep -qF "$word" "$vault" "$gvault" && fail "'$word' is readable in a vault file"
done

log "placeholders survive a restart of slated"
s --json secret ls ws1 >"$work/before.json"
stop_slated
start_slated
s --json secret ls ws1 >"$work/after.json"
cmp -s "$work/before.json" "$work/after.json" || fail "placeholders changed across a restart"

log "a vault copied into another workspace's directory does not open"
cp "$vault" "$ws2dir/secrets.enc"
expect_fail --slate-form 1 "does not open" s secret ls ws2
s --json describe ws2 >"$work/d2.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "does not open" in d["secrets_error"], d' "$work/d2.json" ||
    fail "describe does not say the vault is refused"
rm -f "$ws2dir/secrets.enc"
s secret ls ws2 >/dev/null

log "another user sees none of it"
if command -v setpriv >/dev/null; then
    chmod 0666 "$work/run/slated.sock"
    nob() { setpriv --reuid=65534 --regid=65534 --clear-groups "$slate" --socket "$work/run/slated.sock" "$@"; }
    expect_fail --slate-form 1 "no workspace named 'ws1'" nob secret ls ws1
    expect_fail --slate-form 1 "no workspace named 'ws1'" nob secret rm ws1 AWS
    expect_fail --slate-form 1 "no workspace named 'ws1'" nob secret set ws1 X --host a.example < <(printf 'long-enough-value')
    [ "$(nob --json secret ls | jget secrets)" = "[]" ] || fail "uid 65534 sees root's global secrets"
    chmod 0660 "$work/run/slated.sock"
fi

log "rm of one secret; wipe keeps the vault; rm takes it"
s secret rm ws1 DB_PASSWORD >/dev/null
[ "$(s --json secret ls ws1 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["secrets"]))')" = 3 ] ||
    fail "secret rm did not remove"
s --json secret rm --global GH_TOKEN >"$work/rm.json"
[ "$(jget removed <"$work/rm.json")" = true ] || fail "rm --global"
s wipe ws1 --yes >/dev/null
[ -f "$vault" ] || fail "wipe deleted the vault"
[ "$(s --json secret ls ws1 | jget secrets.0.key)" = ANTHROPIC_API_KEY ] || fail "secrets lost by wipe"
s rm ws1 --yes >/dev/null
[ ! -e "$vault" ] || fail "rm left the vault behind"
expect_fail --slate-form 1 "no workspace named" s secret ls ws1

log "nothing of a value in slated's log"
no_values "$work/slated.log"
grep -q "secret ANTHROPIC_API_KEY" "$work/slated.log" || fail "slated did not log the secret's name"

log "a master key open to others, or damaged, is refused with a clear error"
printf '%s' "$generic" | s secret set ws2 KEEP --host a.example >/dev/null
stop_slated
chmod 0644 "$state/install/master.key"
start_slated
expect_fail --slate-form 1 "master key.*accessible to group or others" s secret ls ws2
expect_fail --slate-form 1 "secrets are unavailable" s secret set ws2 K --host a.example < <(printf 'long-enough-value')
s --json describe ws2 | jget secrets_error | grep -q "master key" || fail "describe does not say why"
stop_slated
chmod 0600 "$state/install/master.key"
start_slated
[ "$(s --json secret ls ws2 | jget secrets.0.key)" = KEEP ] || fail "vault lost after the key came back"
stop_slated
cp "$state/install/master.key" "$work/master.key.saved"
head -c 16 "$work/master.key.saved" >"$state/install/master.key"
start_slated
expect_fail --slate-form 1 "master key.*Size differs" s secret ls ws2
stop_slated
cp "$work/master.key.saved" "$state/install/master.key"
chmod 0600 "$state/install/master.key"
start_slated
[ "$(s --json secret ls ws2 | jget secrets.0.key)" = KEEP ] || fail "vault lost after the key was restored"
s rm ws2 --yes >/dev/null
no_values "$work/slated.log"

log "no core dump of slated by default: its heap holds values on their way through"
stop_slated
old_pattern=$(cat /proc/sys/kernel/core_pattern)
restore_core_pattern() { printf '%s\n' "$1" >/proc/sys/kernel/core_pattern; }
on_exit restore_core_pattern "$old_pattern"
mkdir -p "$work/cores"
echo "$work/cores/core.%p" >/proc/sys/kernel/core_pattern
ulimit -c unlimited # slated inherits it; the default turns it off
# crash_slated: sets a global secret (its value through the API and the parser), then SIGSEGV.
crash_slated() {
    printf '%s' "$generic" | s secret set --global CORE_PROBE --host core.example >/dev/null
    s rm ws1 --yes >/dev/null 2>&1 || true
    kill -SEGV "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null || true
}
start_slated
grep -q "core-dumps = yes" "$work/slated.log" && fail "the default warned about core dumps"
pid=$daemon_pid
crash_slated
daemon_pid=
[ -e "$work/cores/core.$pid" ] && fail "slated (default) left a core dump"
# The control: with core-dumps = yes the same crash leaves one, so the check above could fail.
printf 'core-dumps = yes\n' >"$work/cores.conf"
start_slated -- --config "$work/cores.conf"
grep -q "core-dumps = yes: a crash writes" "$work/slated.log" || fail "core-dumps = yes: no warning"
pid=$daemon_pid
crash_slated
daemon_pid=
[ -s "$work/cores/core.$pid" ] || fail "core-dumps = yes left no core (the check above proves nothing)"
grep -qF -- "$generic" "$work/cores/core.$pid" && log "(the control's core holds the value)"
rm -f "$work/cores/core.$pid"
printf 'core-dumps = maybe\n' >"$work/cores.conf"
set +e
"$slated" --foreground --config "$work/cores.conf" --state-dir "$state" --runtime-dir "$work/run" \
    2>"$work/err"
rc=$?
set -e
[ $rc != 0 ] && grep -q "core-dumps" "$work/err" || fail "core-dumps = maybe: rc=$rc $(cat "$work/err")"
