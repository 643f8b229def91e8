#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The egress settings through a private slated and the real client, without a VM:
#   `secret set --body/--query PARAM` stored (the vault keeps them across a restart of slated),
#   shown by `secret ls` (text and --json) and `describe`, refused for aws and bad names;
#   `create --egress deny-all --allow HOST --deny HOST` gives the policy `slate egress NAME ls`
#   shows; a refused host or default fails the create and leaves no workspace behind; `run`
#   checks the same flags, and refuses them for a workspace that exists (they would not apply);
#   a secret bound to a host that covers names other people own (amazonaws.com, github.io, a
#   top-level domain, an S3 endpoint) is stored with a warning on stderr and in --json and the
#   API reply, a narrow one without; aws --region/--service bind the regional endpoints, refused
#   for other kinds and for bad names, by the client and by slated.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt # describe asks libvirt whether the domain runs

on_exit stop_slated

value=generic-$(head -c 24 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9')
mnt=$(make_loop_fs btrfs egresscli 1G)
state=$mnt/state
start_slated
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
start_slated
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

log "broad bindings: a host covering names other people own warns; aws --region/--service"
aws_value="AKIA$(head -c 40 /dev/urandom | base32 -w0 | tr -dc 'A-Z2-7' | head -c 16) $value"
# The tests' own binding: stored, with one warning naming a name someone else owns and the
# narrowest host to bind instead.
printf '%s' "$aws_value" | s secret set ws1 AWS_BROAD --kind aws --host amazonaws.com \
    >"$work/broad.txt" 2>"$work/broad.err" || fail "secret set amazonaws.com: $(cat "$work/broad.err")"
grep -q '^access-key-id AKIASLATE' "$work/broad.txt" || fail "no placeholders: $(cat "$work/broad.txt")"
[ "$(wc -l <"$work/broad.err")" = 1 ] || fail "want one warning: $(cat "$work/broad.err")"
grep -qF "slate: secret set: warning: secret AWS_BROAD: host amazonaws.com covers the shared zone s3.amazonaws.com, where anyone can own a name: the real access key id and session token would go to evil-bucket.s3.amazonaws.com too; bind the narrowest host instead: BUCKET.s3.REGION.amazonaws.com, and for AWS APIs the regional endpoints SERVICE.REGION.amazonaws.com (--region, --service)" \
    "$work/broad.err" || fail "warning for amazonaws.com: $(cat "$work/broad.err")"
s secret ls ws1 | grep -q "^AWS_BROAD " || fail "a broad binding was not stored"
# --json carries the warnings too (and stderr still says them); a top-level domain is broad.
printf '%s' "$value" | s --json secret set ws1 PAGES --host github.io --host api.example.com --host io \
    >"$work/broad.json" 2>"$work/broad.err" || fail "secret set github.io: $(cat "$work/broad.err")"
python3 - "$work/broad.json" <<'EOF' || fail "secret set --json warnings: $(cat "$work/broad.json")"
import json, sys
w = json.load(open(sys.argv[1]))["warnings"]
assert [x["host"] for x in w] == ["github.io", "io"], w
assert w[0]["zone"] == "github.io" and w[0]["example"] == "evil.github.io", w
assert w[0]["instead"] == "OWNER.github.io" and "evil.github.io" in w[0]["message"], w
assert w[1]["zone"] == "io" and w[1]["example"] == "attacker-owned.io", w
assert "is a top-level domain" in w[1]["message"], w
EOF
[ "$(grep -c '^slate: secret set: warning: secret PAGES: host ' "$work/broad.err")" = 2 ] ||
    fail "want two warnings on stderr: $(cat "$work/broad.err")"
# A narrow host: no warning, and an empty list.
printf '%s' "$value" | s --json secret set ws1 NARROW --host api.example.com --host owner.github.io \
    >"$work/narrow.json" 2>"$work/narrow.err" || fail "secret set narrow: $(cat "$work/narrow.err")"
[ ! -s "$work/narrow.err" ] || fail "a narrow host warned: $(cat "$work/narrow.err")"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["warnings"] == []' "$work/narrow.json" ||
    fail "narrow warnings: $(cat "$work/narrow.json")"
# aws: --region x --service name the regional endpoints (cn- regions under amazonaws.com.cn);
# the s3 endpoint covers every bucket's name, so it warns and names the bucket's own host.
printf '%s' "$aws_value" | s secret set ws1 AWS_REGIONAL --kind aws --region us-east-1,eu-west-1 \
    --service sts --service s3 --region cn-north-1 >/dev/null 2>"$work/regional.err" ||
    fail "secret set --region --service: $(cat "$work/regional.err")"
s --json secret ls ws1 >"$work/regional.json"
python3 - "$work/regional.json" <<'EOF' || fail "aws hosts from --region/--service: $(cat "$work/regional.json")"
import json, sys
d = {x["key"]: x for x in json.load(open(sys.argv[1]))["secrets"]}
assert d["AWS_REGIONAL"]["hosts"] == [
    "sts.us-east-1.amazonaws.com", "s3.us-east-1.amazonaws.com",
    "sts.eu-west-1.amazonaws.com", "s3.eu-west-1.amazonaws.com",
    "sts.cn-north-1.amazonaws.com.cn", "s3.cn-north-1.amazonaws.com.cn"], d["AWS_REGIONAL"]
EOF
[ "$(wc -l <"$work/regional.err")" = 3 ] || fail "want three warnings (s3): $(cat "$work/regional.err")"
grep -qF "host s3.eu-west-1.amazonaws.com is a shared zone, where anyone can own a name: the real access key id and session token would go to evil-bucket.s3.eu-west-1.amazonaws.com too; bind the narrowest host instead: BUCKET.s3.REGION.amazonaws.com" \
    "$work/regional.err" || fail "s3 endpoint warning: $(cat "$work/regional.err")"
if grep -q "host sts\." "$work/regional.err"; then fail "an sts endpoint warned: $(cat "$work/regional.err")"; fi
# With --host too: both.
printf '%s' "$aws_value" | s --json secret set ws1 AWS_BOTH --kind aws --host iam.amazonaws.com \
    --region us-west-2 --service sts >"$work/both.json" 2>"$work/both.err" ||
    fail "secret set --host --region: $(cat "$work/both.err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["hosts"] == ["iam.amazonaws.com", "sts.us-west-2.amazonaws.com"] and d["warnings"] == [], d' "$work/both.json" ||
    fail "--host with --region/--service: $(cat "$work/both.json")"
# Refusals: for aws only, both or neither, names checked, and the aws error names the options.
expect_fail 2 "for --kind aws only" s secret set ws1 K --host a.example --region us-east-1 --service sts </dev/null
expect_fail 2 "give both --region and --service" s secret set ws1 K --kind aws --region us-east-1 </dev/null
expect_fail 2 "give both --region and --service" s secret set ws1 K --kind aws --service sts </dev/null
expect_fail 2 "--region US-EAST-1: not an AWS region" s secret set ws1 K --kind aws --region US-EAST-1 --service sts </dev/null
expect_fail 2 "--region sts: not an AWS region" s secret set ws1 K --kind aws --region sts --service us-east-1 </dev/null
expect_fail 2 "--service s3.evil: not an AWS service" s secret set ws1 K --kind aws --region us-east-1 --service s3.evil </dev/null
expect_fail 2 "or name its AWS endpoints with --region REGION --service SERVICE" s secret set ws1 K --kind aws </dev/null
# slated decides, not only the client: the API refuses the same and warns the same.
api_set() {
    curl -s --unix-socket "$work/run/slated.sock" -H 'Content-Type: application/json' \
        -d "$1" http://slated/v1/secrets
}
api_set '{"workspace": "ws1", "key": "K", "kind": "generic", "regions": ["us-east-1"], "services": ["sts"], "value": "'"$value"'"}' >"$work/api.json"
grep -q "for aws secrets only" "$work/api.json" || fail "API took --region for generic: $(cat "$work/api.json")"
api_set '{"workspace": "ws1", "key": "K", "kind": "aws", "regions": ["us_east_1"], "services": ["sts"], "value": "'"$aws_value"'"}' >"$work/api.json"
grep -q "invalid AWS region 'us_east_1'" "$work/api.json" || fail "API took a bad region: $(cat "$work/api.json")"
api_set '{"workspace": "ws1", "key": "K", "kind": "aws", "value": "'"$aws_value"'"}' >"$work/api.json"
grep -q "or name its endpoints with --region and --service" "$work/api.json" || fail "API: no hosts: $(cat "$work/api.json")"
api_set '{"workspace": "ws1", "key": "K", "kind": "generic", "hosts": ["cloudfront.net"], "value": "'"$value"'"}' >"$work/api.json"
python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["warnings"]
assert len(w) == 1 and w[0]["example"] == "d111111abcdef8.cloudfront.net", w' "$work/api.json" ||
    fail "API warnings: $(cat "$work/api.json")"
grep -q "secret K: host cloudfront.net is a shared zone" "$work/slated.log" || fail "slated did not log the warning"
for k in AWS_BROAD PAGES NARROW AWS_REGIONAL AWS_BOTH K; do s secret rm ws1 $k >/dev/null; done
for f in "$work"/*.txt "$work"/*.json "$work/slated.log"; do
    grep -qF -- "$value" "$f" && fail "the value is in $f"
done
log "egress settings: ok"
