#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The egress settings through a private slated and the real client, without a VM:
#   `secret set --body/--query PARAM` stored (the vault keeps them across a restart of slated),
#   shown by `secret ls` (text and --json) and `describe`, refused for aws and bad names;
#   `create --egress deny-all --allow HOST --deny HOST` gives the policy `slate egress NAME ls`
#   shows; a refused host or default fails the create and leaves no workspace behind; `run`
#   checks the same flags, and refuses them for a workspace that exists (they would not apply).
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt # describe asks libvirt whether the domain runs

slated=$top_builddir/slated
slate=$top_builddir/slate
work=$test_tmpdir
daemon_pid=
on_exit stop_slated
start_daemon() { start_slated; }

value=generic-$(head -c 24 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9')
mnt=$(make_loop_fs btrfs egresscli 1G)
state=$mnt/state
start_daemon
truncate -s 64M "$work/fake-disk.img"
s image import test "$work/fake-disk.img" >/dev/null

log "create --egress deny-all --allow/--deny: the policy egress ls shows"
s create ws1 --home-size 64M --egress deny-all --allow github.com --allow 10.1.0.0/16 \
    --deny api.github.com >/dev/null
s egress ws1 ls >"$work/ls.txt"
cat >"$work/want.txt" <<'EOF'
default: deny-all
allow  github.com
allow  10.1.0.0/16
deny   api.github.com
EOF
diff -u "$work/want.txt" "$work/ls.txt" || fail "egress ls after create --egress"
s --json egress ws1 ls | python3 -c 'import json,sys; d=json.load(sys.stdin)
assert d["default"] == "deny-all" and [r["host"] for r in d["rules"]] == ["github.com", "10.1.0.0/16", "api.github.com"], d' ||
    fail "egress ls --json after create --egress"
# --allow alone: the default stays allow-all; no flag: no policy file, allow-all.
s create ws2 --home-size 64M --allow Example.COM. >/dev/null
[ "$(s egress ws2 ls)" = "$(printf 'default: allow-all\nallow  example.com')" ] ||
    fail "create --allow: $(s egress ws2 ls)"
s create ws3 --home-size 64M >/dev/null
[ "$(s egress ws3 ls)" = "default: allow-all" ] || fail "create without egress flags"

log "a refused host fails the create and leaves nothing behind"
for bad in '*.example.com' 'a..b' '127.1' 'http://x/'; do
    expect_fail 1 "invalid host" s create bad1 --home-size 64M --egress deny-all --allow ok.test --allow "$bad"
    expect_fail 1 "invalid host" s create bad1 --home-size 64M --deny "$bad"
done
expect_fail 2 "allow-all or deny-all" s create bad1 --home-size 64M --egress maybe
expect_fail 1 "no workspace named 'bad1'" s describe bad1
find "$state" -name bad1 | grep -q . && fail "a refused create left bad1 behind"

log "run takes the same flags: checked the same way, and refused for a workspace that exists"
expect_fail 2 "allow-all or deny-all" s run --name bad2 --egress maybe -- true
expect_fail 1 "invalid host" s run --name bad2 --egress deny-all --allow "bad host" -- true
expect_fail 1 "no workspace named 'bad2'" s describe bad2
# ws1 exists: the policy would not apply, so the run is refused before anything starts.
expect_fail 1 "exists already" s run --name ws1 --egress allow-all -- true
s egress ws1 ls | head -1 | grep -qx "default: deny-all" || fail "a refused run changed ws1's policy"
virsh -c qemu:///system list --all --name | grep -q "ws1" && fail "a refused run started ws1"

log "secret set --body --query --allow-plain-http: stored, listed, described"
printf '%s' "$value" | s secret set ws1 API_KEY --host api.example.com --body --query api_key >/dev/null
printf '%s' "$value" | s secret set ws1 PLAIN_KEY --host api.example.com >/dev/null
printf '%s' "$value" | s secret set ws1 CLEAR_KEY --host api.example.com --allow-plain-http >/dev/null
s --json secret ls ws1 >"$work/ls.json"
python3 - "$work/ls.json" <<'EOF' || fail "secret ls --json: $(cat "$work/ls.json")"
import json, sys
d = {x["key"]: x for x in json.load(open(sys.argv[1]))["secrets"]}
assert d["API_KEY"]["body"] is True and d["API_KEY"]["query"] == "api_key", d
assert d["PLAIN_KEY"]["body"] is False and "query" not in d["PLAIN_KEY"], d
assert d["PLAIN_KEY"]["allow_plain_http"] is False, d
assert d["CLEAR_KEY"]["allow_plain_http"] is True, d
EOF
s secret ls ws1 >"$work/ls.txt"
grep -q "^API_KEY .*headers,body,?api_key " "$work/ls.txt" || fail "secret ls text: $(cat "$work/ls.txt")"
grep -q "^PLAIN_KEY .*headers  " "$work/ls.txt" || fail "secret ls text: $(cat "$work/ls.txt")"
grep -q "^CLEAR_KEY .*headers+plain-http " "$work/ls.txt" || fail "secret ls text: $(cat "$work/ls.txt")"
s describe ws1 >"$work/describe.txt"
grep -q "API_KEY (generic, workspace) -> api.example.com; in bodies; in ?api_key=$" "$work/describe.txt" ||
    fail "describe: $(cat "$work/describe.txt")"
grep -q "CLEAR_KEY (generic, workspace) -> api.example.com; over plain HTTP too$" "$work/describe.txt" ||
    fail "describe: $(cat "$work/describe.txt")"
s --json describe ws1 | python3 -c 'import json,sys; d=json.load(sys.stdin)
k={x["key"]: x for x in d["secrets"]}; assert k["API_KEY"]["body"] and k["API_KEY"]["query"] == "api_key", k' ||
    fail "describe --json"
log "the settings survive a restart (the vault keeps them)"
stop_slated
start_daemon
s --json secret ls ws1 >"$work/ls2.json"
cmp -s "$work/ls.json" "$work/ls2.json" || fail "secret ls changed across a restart"
expect_fail 2 "--query a b" s secret set ws1 K --host a.example --query 'a b' </dev/null
expect_fail 2 "not for aws" s secret set ws1 K --kind aws --host a.example --body </dev/null
# One host normaliser for secret set, the policy and the proxy: a host the proxy could never
# match (it refuses such a name in a request) is refused when the secret is set, saying why.
for bad in a.0x7f 1.2.3.0x4 -a.example a-.example 'fe80::1%eth0' "$(printf 'a%.0s' {1..64}).test"; do
    printf '%s' "$value" | expect_fail 1 "host '" s secret set ws1 K --host "$bad"
    case $bad in -*) continue ;; esac # an option to getopt
    expect_fail 1 "invalid host" s egress ws1 allow "$bad"
done
s egress ws1 allow 127.0.0.1. >/dev/null || fail "egress allow 127.0.0.1. (one trailing dot)"
s egress ws1 ls | grep -q "^allow  127.0.0.1$" || fail "egress ls: $(s egress ws1 ls)"
for f in "$work"/*.txt "$work"/*.json "$work/slated.log"; do
    grep -qF -- "$value" "$f" && fail "the value is in $f"
done
log "egress settings: ok"
