#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The GitLab Runner custom executor driver (`slate ci gitlab`, doc/ci-runners.md) against a real
# slated, the test image under TCG and a real HTTPS git server, playing gitlab-runner's documented
# sequence of calls with its documented environment (CUSTOM_ENV_*, BUILD_FAILURE_EXIT_CODE and
# SYSTEM_FAILURE_EXIT_CODE, run_exec SCRIPT STAGE with scripts in the runner's bash form):
#   * config prints the executor's JSON; prepare creates and starts ci-RUNNER-JOB from the image
#     the job's image maps to, with the job token and a masked variable as secrets bound to
#     CI_SERVER_HOST;
#   * run, stage by stage: get_sources clones https://CI_SERVER_HOST/group/project.git with the
#     token in the URL, as the runner does, from lighttpd + git http-backend on 127.0.0.1 that
#     accepts only HTTP Basic auth with the real token; build_script prints from the clone;
#   * the real token and variable are nowhere in the guest: not in a session's environment, the
#     scripts the guest got, the clone's git config, any file under /builds /tmp /root /home
#     /run /etc, nor in disk.img or home.img (each scan first shown to find the placeholder);
#   * a failing build_script exits $BUILD_FAILURE_EXIT_CODE; run on a workspace that is gone,
#     and a prepare whose image maps to nothing or to no slate image, exit
#     $SYSTEM_FAILURE_EXIT_CODE and leave nothing behind;
#   * a job killed mid-stage (SIGTERM to run, then cleanup) leaves no driver process, guest
#     process, workspace, domain or loop device.
# CI_SERVER_HOST (gitlab.ci.test) reaches 127.0.0.1 through slated's test-only proxy settings
# (an upstream name pointed at 127.0.0.1, the test CA trusted for upstream), never /etc/hosts.
# Run through tests/integration/run-one, which sources lib.sh.
# shellcheck disable=SC2154 # lib.sh's variables
set -euo pipefail

ensure_libvirt
ensure_test_image
for cmd in lighttpd git openssl python3; do
    command -v $cmd >/dev/null || skip "$cmd not found (apt-get install lighttpd lighttpd-mod-openssl git)"
done
backend=/usr/lib/git-core/git-http-backend
[ -x "$backend" ] || skip "$backend not found (apt-get install git)"
lighttpd_mods=$(dirname "$(dpkg -L lighttpd 2>/dev/null | grep -m1 '/mod_cgi.so$' || echo /usr/lib/lighttpd/x)")
[ -f "$lighttpd_mods/mod_openssl.so" ] || skip "lighttpd has no mod_openssl (apt-get install lighttpd-mod-openssl)"

host=gitlab.ci.test
server_pid=
on_exit stop_bg server_pid
on_exit stop_slated

rand() { head -c 300 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9' | head -c "$1"; }
token=glcbt-64_$(rand 40)
masked=dk-$(rand 32)
# no_real_value FILE WHAT: fails when FILE holds a real value, or when the scan fails (lib.sh).
no_real_value() { lacks_bytes "$1" "$2" "$token" "$masked"; }
# has_placeholder FILE VALUE WHAT: the scan first shown to find what it looks for.
has_placeholder() { holds_bytes "$1" "$3" "$2"; }

# ---- the git server: lighttpd, HTTPS with a test CA's certificate, Basic auth, http-backend ----
make_test_certs "$work" "slate ci-gitlab test CA" "$host" "DNS:$host,IP:127.0.0.1"
mkdir -p "$work/repos/group" "$work/src"
git init -q --bare "$work/repos/group/project.git"
git -C "$work/src" init -q
echo "hello from the clone $$" >"$work/src/README"
git -C "$work/src" add README
git -C "$work/src" -c user.name=ci -c user.email=ci@test commit -qm "the commit to build"
git -C "$work/src" push -q "$work/repos/group/project.git" HEAD:refs/heads/main
git --git-dir="$work/repos/group/project.git" symbolic-ref HEAD refs/heads/main
printf 'gitlab-ci-token:%s\n' "$token" >"$work/users"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/lighttpd.conf" <<EOF
server.modules = ("mod_alias", "mod_auth", "mod_authn_file", "mod_cgi", "mod_setenv",
                  "mod_openssl", "mod_accesslog")
server.modules-directory = "$lighttpd_mods"
server.document-root = "$work/repos"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$work/lighttpd.err"
accesslog.filename = "$work/access.log"
ssl.engine = "enable"
ssl.pemfile = "$work/srv.pem"
ssl.privkey = "$work/srv.key"
alias.url = ("/" => "$backend/")
cgi.assign = ("" => "")
setenv.add-environment = ("GIT_PROJECT_ROOT" => "$work/repos", "GIT_HTTP_EXPORT_ALL" => "")
auth.backend = "plain"
auth.backend.plain.userfile = "$work/users"
auth.require = ("/" => ("method" => "basic", "realm" => "gitlab", "require" => "valid-user"))
EOF
lighttpd -D -f "$work/lighttpd.conf" >"$work/lighttpd.out" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    curl -s -o /dev/null --cacert "$work/ca.pem" "https://127.0.0.1:$port/" && break
    kill -0 "$server_pid" 2>/dev/null || fail "lighttpd died: $(cat "$work/lighttpd.out" "$work/lighttpd.err")"
    sleep 0.1
done
# The server itself: the real token clones, another is refused with 401.
url="https://127.0.0.1:$port/group/project.git"
GIT_SSL_CAINFO=$work/ca.pem git clone -q "https://gitlab-ci-token:$token@127.0.0.1:$port/group/project.git" \
    "$work/direct" || fail "the git server refuses the real token"
st=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$work/ca.pem" -u "gitlab-ci-token:wrong-$(rand 20)" \
    "$url/info/refs?service=git-upload-pack")
[ "$st" = 401 ] || fail "the git server answered $st to a wrong token, want 401"
log "git server on 127.0.0.1:$port: the real token clones, another gets 401"

# ---- slated, with the git server reachable as $host through the proxy ----
mnt=$(make_loop_fs btrfs cigitlab 3G)
state=$mnt/state
start_slated SLATE_PROXY_TEST_CA_FILE="$work/ca.pem" \
    SLATE_PROXY_TEST_CONNECT_TO="$host:443:127.0.0.1:$port"
import_test_image
export SLATE_SOCKET=$work/run/slated.sock

# ---- gitlab-runner's side: its environment and its scripts ----
export BUILD_FAILURE_EXIT_CODE=17 SYSTEM_FAILURE_EXIT_CODE=23
export CUSTOM_ENV_CI_RUNNER_SHORT_TOKEN=Xy_9zAb8 CUSTOM_ENV_CI_SERVER_HOST=$host
export CUSTOM_ENV_CI_JOB_TOKEN=$token CUSTOM_ENV_DEPLOY_KEY=$masked
export CUSTOM_ENV_CI_JOB_IMAGE=debian:bookworm
export CUSTOM_ENV_CI_REPOSITORY_URL=https://gitlab-ci-token:$token@$host/group/project.git
drv() { "$slate" ci gitlab "$@"; }
prepare_args=(--image-map debian:bookworm=test --image-map alpine:3=no-such-image
    --secret-var DEPLOY_KEY --secret-var NOT_SET --allow 127.0.0.1 --memory 512 --cpus 1)
# job ID: sets CUSTOM_ENV_CI_JOB_ID and ws, the workspace the driver names after the job.
job() {
    export CUSTOM_ENV_CI_JOB_ID=$1
    ws=ci-xy9zab8-$1
}
# loops: the loop devices backed by files of this test other than its own file system's image
# (slated's pool would be one); other tests on the host may come and go with theirs.
loops() {
    losetup -n -O NAME,BACK-FILE 2>/dev/null | grep -F "$test_tmpdir" | grep -vF "$test_tmpdir/cigitlab.img" |
        sort || true
}
# nothing_left: no workspace, domain or loop device stayed after a job.
nothing_left() {
    if s ls | grep -q "^$ws "; then fail "workspace $ws is still there: $(s ls)"; fi
    if v list --all --name | grep -qx "slate-$ws"; then fail "domain slate-$ws is still there"; fi
    [ -z "$(loops)" ] || fail "loop devices stayed: $(loops)"
}

# gl_script STAGE BODY: the script gitlab-runner's bash shell writes for a stage: the job's
# variables exported (the real token literally, as the runner writes it) and the stage's
# commands, all in one eval of an ANSI-C quoted string.
gl_script() {
    local stage=$1 body=$2 inner q
    inner="export CI_JOB_TOKEN=$token
export CI_REGISTRY_PASSWORD=$token
export CI_REPOSITORY_URL=$CUSTOM_ENV_CI_REPOSITORY_URL
export CI_SERVER_HOST=$host
export DEPLOY_KEY=$masked
export CI_PROJECT_DIR=/builds/group/project
export CI_JOB_ID=$CUSTOM_ENV_CI_JOB_ID
$body"
    q=${inner//\\/\\\\}
    q=${q//\'/\\\'}
    q=${q//$'\n'/\\n}
    printf '#!/usr/bin/env bash\n\nset -eo pipefail\nset +o noclobber\n: | eval $'\''%s'\''\nexit 0\n' \
        "$q" >"$work/script.$stage"
    echo "$work/script.$stage"
}
# run_stage STAGE BODY: run_exec for the stage; its stdout in $work/out.STAGE, status printed.
run_stage() {
    local rc=0 f
    f=$(gl_script "$1" "$2")
    drv run "$f" "$1" >"$work/out.$1" 2>"$work/err.$1" || rc=$?
    echo "$rc"
}
want_stage() { # STAGE RC BODY
    local got
    got=$(run_stage "$1" "$3")
    [ "$got" = "$2" ] || fail "stage $1 exited $got, want $2: $(cat "$work/out.$1" "$work/err.$1")"
}

[ -z "$(loops)" ] || fail "loop devices before the first job: $(loops)"

# ---- config ----
job "$$01"
drv config --builds-dir /builds >"$work/config.json" || fail "config failed"
python3 - "$work/config.json" "$ws" <<'EOF' || fail "config: $(cat "$work/config.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["builds_dir"] == "/builds" and d["cache_dir"] == "/cache", d
assert d["builds_dir_is_shared"] is False, d
assert d["driver"]["name"] == "slate" and d["driver"]["version"], d
assert d["hostname"] == sys.argv[2], d
EOF

# ---- prepare ----
drv prepare "${prepare_args[@]}" >"$work/prepare.out" 2>"$work/prepare.err" ||
    fail "prepare exited $?: $(cat "$work/prepare.err")"
grep -q "creating workspace $ws from image test" "$work/prepare.err" || fail "prepare: $(cat "$work/prepare.err")"
grep -q "NOT_SET: nothing to protect" "$work/prepare.err" || fail "prepare did not say NOT_SET is unset"
s ls | grep -q "^$ws  *running" || fail "prepare left no running $ws: $(s ls)"
s secret ls "$ws" --json >"$work/secrets.json"
no_real_value "$work/secrets.json" "slate secret ls"
ph=$(python3 -c 'import json,sys
d = {s["key"]: s for s in json.load(sys.stdin)["secrets"]}
assert d["CI_JOB_TOKEN"]["hosts"] == [sys.argv[1]] and d["DEPLOY_KEY"]["hosts"] == [sys.argv[1]], d
print(d["CI_JOB_TOKEN"]["placeholders"]["value"], d["DEPLOY_KEY"]["placeholders"]["value"])' "$host" \
    <"$work/secrets.json") || fail "the job's secrets: $(cat "$work/secrets.json")"
read -r ph_token ph_masked <<<"$ph"
log "prepare: $ws running; CI_JOB_TOKEN -> $ph_token"

# ---- run, stage by stage, as gitlab-runner calls it ----
want_stage prepare_script 0 'echo "Running on $(hostname) via slate..."'
want_stage get_sources 0 'echo "Fetching changes with git depth set to 20..."
rm -rf "$CI_PROJECT_DIR" && mkdir -p "$CI_PROJECT_DIR" && cd "$CI_PROJECT_DIR"
git init -q
git remote add origin "$CI_REPOSITORY_URL"
git -c http.lowSpeedTime=120 fetch -q origin +refs/heads/main:refs/remotes/origin/main
git checkout -q -B main origin/main
echo "Checking out $(git rev-parse --short HEAD)"'
want_stage build_script 0 'cd "$CI_PROJECT_DIR"; echo "build: $(cat README) / $(git log -1 --format=%s)"'
grep -qx "build: hello from the clone $$ / the commit to build" "$work/out.build_script" ||
    fail "build_script did not print from the clone: $(cat "$work/out.build_script")"
want_stage after_script 0 'echo "after_script ran"'
want_stage upload_artifacts_on_success 0 'echo "Uploading artifacts..."'
want_stage cleanup_file_variables 0 'rm -f "$CI_PROJECT_DIR.tmp/"*'
# lighttpd buffers its access log: stopping it writes it out (no stage needs the server now).
stop_bg server_pid
grep -q "$host gitlab-ci-token .*GET /group/project.git/info/refs?service=git-upload-pack HTTP/1.1\" 200" \
    "$work/access.log" ||
    fail "the git server served no authenticated clone: $(cat "$work/access.log")"
log "the clone went through the proxy with the real token: $(grep -c '" 200 ' "$work/access.log") requests served"

# ---- the guest holds placeholders only ----
gx() { timeout -k 5 120 "$slate" exec --user root "$ws" -- "$@"; }
gx sh -c 'cat /tmp/slate-ci/*.sh' >"$work/guest-scripts.txt"
grep -qF -- "$ph_token" "$work/guest-scripts.txt" || fail "the guest's scripts lack the token's placeholder"
grep -qF -- "$ph_masked" "$work/guest-scripts.txt" || fail "the guest's scripts lack DEPLOY_KEY's placeholder"
no_real_value "$work/guest-scripts.txt" "the scripts the guest got"
gx cat /builds/group/project/.git/config >"$work/git-config.txt"
grep -qF -- "https://gitlab-ci-token:$ph_token@$host/group/project.git" "$work/git-config.txt" ||
    fail "the clone's git config lacks the placeholder URL: $(cat "$work/git-config.txt")"
no_real_value "$work/git-config.txt" "the clone's git config"
{ gx env; "$slate" exec "$ws" -- env; } >"$work/guest-env.txt"
grep -qF -- "CI_JOB_TOKEN=$ph_token" "$work/guest-env.txt" || fail "the guest's sessions lack CI_JOB_TOKEN's placeholder"
no_real_value "$work/guest-env.txt" "a session's environment"
gx tar cf - /builds /tmp /root /home /run /etc 2>/dev/null >"$work/guest.tar" || true
has_placeholder "$work/guest.tar" "$ph_token" "the guest's files"
no_real_value "$work/guest.tar" "the guest's files"
rm -f "$work/guest.tar"
gx sync

# ---- a failing build_script: the build failure code; after_script still runs ----
want_stage build_script 17 'echo "about to fail"; false'
grep -q "about to fail" "$work/out.build_script" || fail "the failing build_script's output is lost"
want_stage after_script 0 'echo "after_script ran"'

# The disks, with the guest stopped (cleanup powers it off anyway): the placeholder is on
# disk.img (the clone's git config), no real value on either image.
s stop --force "$ws" >/dev/null
wsdir=$(dirname "$(find "$state" -path "*/$ws/workspace.json" | head -1)")
has_placeholder "$wsdir/disk.img" "$ph_token" disk.img
no_real_value "$wsdir/disk.img" disk.img
no_real_value "$wsdir/home.img" home.img
log "no real value in the guest: environment, scripts, git config, files, disk.img, home.img"

# ---- cleanup; then run on a workspace that is gone is a system failure ----
drv cleanup >"$work/cleanup.out" 2>&1 || fail "cleanup exited $?: $(cat "$work/cleanup.out")"
nothing_left
drv cleanup >"$work/cleanup.out" 2>&1 || fail "a second cleanup (nothing there) exited $?"
want_stage build_script 23 'echo never'
grep -q "$ws" "$work/err.build_script" || fail "run on a gone workspace: $(cat "$work/err.build_script")"
no_real_value "$work/slated.log" "slated's log"
log "job 1: config, prepare, 6 stages, a failing build_script (17), cleanup: nothing left"

# ---- job 2: killed mid-stage (SIGTERM to run), then cleanup ----
job "$$02"
drv prepare "${prepare_args[@]}" >/dev/null 2>"$work/prepare.err" || fail "prepare 2: $(cat "$work/prepare.err")"
f=$(gl_script build_script 'echo started; sleep 600; echo "not reached"')
# The driver itself in the background (not the drv function: its subshell would take the
# signal), as gitlab-runner runs it.
"$slate" ci gitlab run "$f" build_script >"$work/out.killed" 2>&1 &
run_pid=$!
for _ in $(seq 300); do
    grep -q started "$work/out.killed" && break
    kill -0 "$run_pid" 2>/dev/null || fail "run ended early: $(cat "$work/out.killed")"
    sleep 0.1
done
grep -q started "$work/out.killed" || fail "the stage never started: $(cat "$work/out.killed")"
kill -TERM "$run_pid"
rc=0
timeout 20 tail --pid="$run_pid" -f /dev/null || fail "run did not end within 20 s of SIGTERM"
wait "$run_pid" || rc=$?
[ "$rc" = 143 ] || fail "run exited $rc after SIGTERM, want 143: $(cat "$work/out.killed")"
if pgrep -f "ci gitlab run $work/script.build_script" >/dev/null; then
    fail "a driver process stayed: $(pgrep -af "ci gitlab run")"
fi
for _ in $(seq 50); do
    "$slate" exec --user root "$ws" -- sh -c 'ps | grep -v grep | grep -q "sleep 600"' || break
    sleep 0.2
done
if "$slate" exec --user root "$ws" -- sh -c 'ps | grep -v grep | grep -q "sleep 600"'; then
    fail "the killed stage's command still runs in the guest"
fi
drv cleanup >"$work/cleanup.out" 2>&1 || fail "cleanup 2 exited $?: $(cat "$work/cleanup.out")"
nothing_left
log "job 2: SIGTERM mid-stage ended run ($rc) and the guest command; cleanup left nothing"

# ---- job 3: prepare failures are system failures and leave nothing ----
job "$$03"
export CUSTOM_ENV_CI_JOB_IMAGE=registry.example/unknown:1
expect_fail 23 "has no slate image: map it with --image-map" drv prepare "${prepare_args[@]}"
nothing_left
export CUSTOM_ENV_CI_JOB_IMAGE=alpine:3
expect_fail 23 "no-such-image" drv prepare "${prepare_args[@]}"
nothing_left
drv cleanup >/dev/null 2>&1 || fail "cleanup after a failed prepare exited $?"
log "job 3: an unmapped image and a missing slate image: 23, nothing left"
