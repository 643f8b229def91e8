#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Secrets as the guest sees them, on the test image under TCG: after `slate start` the guest's
# sessions have every secret's placeholder in their environment and configured files (~/.env,
# ~/.git-credentials, ~/.config/gh/hosts.yml, ~/.aws/credentials), a secret removed while the
# workspace is stopped is gone from the guest after the next start, and no real value is anywhere
# in the guest: not in the environment or files of a session, not in disk.img or home.img, not
# in a dump of the guest's memory (`virsh dump --memory-only`). Each scan is first shown to find
# what it looks for (the placeholders), so an empty scan means something.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

ws=sg$$
gexec() { s exec "$ws" -- "$@"; }
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

rand() { head -c 200 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | head -c "$1"; }
anthropic=sk-ant-api03-$(rand 93)AA
openai=sk-proj-$(rand 48)
github=ghp_$(rand 36)
gitlab=glpat-$(rand 20)
aws_id=AKIA$(head -c 40 /dev/urandom | base32 -w0 | tr -dc 'A-Z2-7' | head -c 16)
aws_secret=$(rand 40)
aws_token=$(rand 120)
generic=gen-$(rand 40)
doomed=doomed-$(rand 40)
late=late-$(rand 40)
values=("$anthropic" "$openai" "$github" "$gitlab" "$aws_id" "$aws_secret" "$aws_token" "$generic"
    "$doomed" "$late")
# no_real_value FILE WHAT: one pass over FILE's data for every real value at once; a scan that
# fails (grep on a sparse 4 GiB image runs out of memory) fails the test (lib.sh, lacks_bytes).
no_real_value() { lacks_bytes "$1" "$2" "${values[@]}"; }

mnt=$(make_loop_fs btrfs secretsg 3G)
state=$mnt/state
start_slated
import_test_image
s create "$ws" --home-size 64M >/dev/null

# set KIND KEY VALUE ARGS...: stores a secret, prints its placeholders (one per line).
set_secret() {
    local kind=$1 key=$2 value=$3
    shift 3
    printf '%s\n' "$value" | s secret set "$ws" "$key" --kind "$kind" "$@" --json >"$work/set.json" ||
        fail "secret set $key: $(cat "$work/set.json")"
    python3 -c 'import json,sys; [print(v) for v in json.load(sys.stdin)["placeholders"].values()]' \
        <"$work/set.json"
}
ph_anthropic=$(set_secret anthropic ANTHROPIC_API_KEY "$anthropic" --host api.anthropic.com)
ph_openai=$(set_secret openai OPENAI_API_KEY "$openai" --host api.openai.com --file '~/.env')
ph_github=$(set_secret github GH_TOKEN "$github" --host github.com,api.github.com \
    --file '~/.git-credentials')
ph_gitlab=$(set_secret gitlab GITLAB_TOKEN "$gitlab" --host gitlab.com --env GITLAB_TOKEN)
ph_aws=$(set_secret aws AWS "$aws_id $aws_secret $aws_token" --host amazonaws.com \
    --file '~/.aws/credentials')
ph_generic=$(set_secret generic GENERIC_TOKEN "$generic" --host api.example.com \
    --file '~/.config/gh/hosts.yml')
ph_doomed=$(set_secret generic DOOMED "$doomed" --host doomed.example.com --file '~/doomed.txt')
placeholders=($ph_anthropic $ph_openai $ph_github $ph_gitlab $ph_aws $ph_generic)
[ ${#placeholders[@]} -ge 8 ] || fail "expected at least 8 placeholders, got ${#placeholders[@]}"

log "start: provisioning hands the guest its placeholders"
s start "$ws" >/dev/null || fail "start: $(tail -5 "$work/slated.log")"
gexec sh -c 'env; for f in ~/.env ~/.git-credentials ~/.aws/credentials ~/.config/gh/hosts.yml ~/doomed.txt; do echo "== $f"; cat "$f"; done' \
    >"$work/guest.txt" 2>&1 || fail "reading the guest's view: $(cat "$work/guest.txt")"
grep -qx "ANTHROPIC_API_KEY=$ph_anthropic" "$work/guest.txt" || fail "ANTHROPIC_API_KEY placeholder missing"
grep -qx "GITLAB_TOKEN=$ph_gitlab" "$work/guest.txt" || fail "GITLAB_TOKEN placeholder missing"
grep -qx "OPENAI_API_KEY=$ph_openai" "$work/guest.txt" || fail "~/.env lacks OPENAI_API_KEY"
grep -q "https://[^:]*:$ph_github@github.com" "$work/guest.txt" || fail "~/.git-credentials lacks the placeholder"
for p in $ph_aws; do grep -q -- "$p" "$work/guest.txt" || fail "~/.aws/credentials lacks $p"; done
grep -q -- "$ph_generic" "$work/guest.txt" || fail "hosts.yml lacks the generic placeholder"
grep -q -- "$ph_doomed" "$work/guest.txt" || fail "~/doomed.txt lacks its placeholder"
no_real_value "$work/guest.txt" "the guest's environment or files"
# Files belong to the workspace user and are private.
[ "$(gexec stat -c '%U %a' /home/slate/.git-credentials)" = "slate 600" ] ||
    fail "~/.git-credentials: $(gexec stat -c '%U %a' /home/slate/.git-credentials)"
# Written to the disk (the scans below need it there).
gexec sync

log "memory dump of the running guest holds placeholders, never a real value"
virsh -q -c "$SLATE_TEST_URI" dump --memory-only "slate-$ws" "$work/mem.dump" >/dev/null ||
    fail "virsh dump failed"
holds_bytes "$work/mem.dump" "the memory dump" "$ph_anthropic"
no_real_value "$work/mem.dump" "the guest's memory"
rm -f "$work/mem.dump"

log "a secret set while the workspace runs reaches its sessions at once"
ph_late=$(set_secret generic LATE_TOKEN "$late" --host late.example.com)
python3 -c 'import json,sys; sys.exit(sys.argv[1] not in json.load(sys.stdin)["reprovisioned"])' \
    "$ws" <"$work/set.json" || fail "secret set did not reprovision the running workspace"
[ "$(gexec sh -c 'echo "$LATE_TOKEN"')" = "$ph_late" ] || fail "LATE_TOKEN not in a new session"
gexec env >"$work/env2.txt"
no_real_value "$work/env2.txt" "a session's environment after a change"

log "a secret removed while stopped is gone from the guest after the next start"
s stop "$ws" >/dev/null
s secret rm "$ws" DOOMED >/dev/null
s start "$ws" >/dev/null || fail "second start: $(tail -5 "$work/slated.log")"
if gexec test -e /home/slate/doomed.txt; then fail "~/doomed.txt survived its secret"; fi
if gexec env | grep -q '^DOOMED='; then fail "DOOMED still in the environment"; fi
gexec grep -q -- "$ph_anthropic" /run/slate/env || fail "the other placeholders went too"
s stop "$ws" >/dev/null

log "disk.img and home.img hold placeholders, never a real value"
wsdir=$(dirname "$(find "$state" -path "*/$ws/workspace.json" | head -1)")
holds_bytes "$wsdir/home.img" home.img "$ph_github"
no_real_value "$wsdir/disk.img" disk.img
no_real_value "$wsdir/home.img" home.img
s rm "$ws" --yes >/dev/null
echo "secrets in the guest: placeholders only (env, files, memory, disks)"
