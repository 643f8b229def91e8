#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The examples of the README and of the man pages run as written, in order, against the test
# image. Every indented block of the README and every .nf/.fi block of the man pages
# (as built, with this build's paths) is found here; each command in it (continuation lines
# joined) is run, or checked as the file it shows (slate.conf(5)'s EXAMPLE), or skipped with its
# reason from the table below, by command or by whole section. A block or command the table does
# not know is run, and a table entry that matches nothing fails the test, so that no example
# goes untested silently. Some examples' output and effects are checked too (want_out, after).
#
# The README's commands run in $top_builddir with the build tree first on PATH, as the README
# says, each in this shell (an export holds for the next ones) with stdin from /dev/null. Three
# rewrites make them private to this test, since other tests run beside it on the same libvirt:
# /tmp/slate becomes the test's scratch directory, images/test/out the test image in use, and the
# workspace name "dev" (a domain name, global on libvirt) one of this test's own. Boots: one
# workspace (slate start) and one slate run --rm. The man pages' commands run in a scratch
# directory of their own. Run through tests/integration/run-one, which sources lib.sh.
# shellcheck disable=SC2154 # lib.sh and run-one set top_srcdir, top_builddir, test_tmpdir
set -euo pipefail

ensure_libvirt
ensure_test_image
command -v python3 >/dev/null || skip "python3 not found (apt-get install python3)"
command -v curl >/dev/null || skip "curl not found (apt-get install curl)"

work=$test_tmpdir
ws=docs$$
slate=$top_builddir/slate

# ---- what cannot run here, and why (keys: the command as extracted, or "SECTION:" for a block)
declare -A skip=(
    ["README:Layout:"]="a map of the source tree, not commands"
    [".ci/setup && make demo"]="installs Debian packages (network) and builds the test image; \
this test boots the same image"
    ["make check"]="this test runs inside make check"
    ["./configure --prefix=/usr --sysconfdir=/etc --localstatedir=/var && make && sudo make install"]="\
installs into /usr; tests/unit/install-files.test installs into a DESTDIR"
    ["sudo systemd-sysusers && sudo systemd-tmpfiles --create /usr/lib/tmpfiles.d/slate.conf"]="\
changes the host's users and /run; tests/unit/systemd-units.test checks the entries"
    ["sudo systemctl daemon-reload && sudo systemctl enable --now slated.socket slated.service"]="\
needs systemd as PID 1 and an installed slated; tests/unit/systemd-activation.test covers it"
    ["sudo usermod -aG slate \"\$USER\""]="changes the host's groups"
    ["slate-catalog.1:COMMANDS:"]="the shape of verify --json's output, not commands"
    ["slate.conf.5:DESCRIPTION:"]="slated's messages for a bad file, not commands"
    ["slated.8:MASTER KEY:"]="moves the installed slated's master key into a systemd credential: \
needs systemd as PID 1 and the host's credential key"
    ["slated.8:STOPPING AND RESTARTING:"]="a drop-in for the installed slated.service; \
tests/unit/systemd-units.test verifies the units"
    ["slate.1:EXAMPLES:"]="what root's ls and a user outside the socket's group see: output, not \
commands; tests/integration/workspaces.sh and daemon.sh check both"
    ["slated.8:EXAMPLES:"]="needs a group dev and root's /srv and /run; tests/integration/daemon.sh \
and workspaces.sh run the same steps (--socket-group with a test group, --cleanup)"
    ["slate.1:REMOTE HOSTS:"]="the ssh command line slate runs for --host, not one to type; \
tests/integration/remote-ssh.sh runs it against a real sshd on 127.0.0.1"
    ["slate console dev"]="interactive: it copies the serial console until Ctrl-] on a terminal; \
tests/integration/boot-test-image.sh reads the console"
)
# Interactive commands: what they get on stdin instead of /dev/null (and 120 s at most).
declare -A input=(
    ["slate shell dev"]="echo shell-example-ok; exit"
)
# Examples that show a file rather than commands: the program that checks the file.
declare -A file_check=(
    ["slate.conf.5"]="$top_builddir/tests/unit/test-conf --check"
)
# Files a man page's example works on, made before its first command.
declare -A fixture=(
    ["stable.json"]="$top_srcdir/tests/data/catalog/catalog.json"
)
# What an example's output must hold (what the README says it prints).
declare -A want_out=(
    ["slate exec dev -- uname -a"]="Linux"
    ["slate shell dev"]="shell-example-ok"
    ["slate run --rm --share /tmp/slate/src:/src:ro -- cat /src/file"]="hello"
)
# Checks run after an example: what the documentation says about its result.
declare -A after=(
    ["slate start dev"]=check_console_log
)
declare -A used=()

# check_console_log: the running workspace's console is logged where slate(1) says, read for the
# README's slated (RUNTIME_DIR: its --runtime-dir).
check_console_log() {
    local page=$top_builddir/doc/slate.1 path
    path=$(grep -m 1 -oE '[^ ]*/vm/NAME/console\.log' <<<"$(sed 's/\\-/-/g; s/\\f[BIRP]//g' "$page")")
    [ -n "$path" ] || fail "slate(1) does not say where the console is logged"
    path=${path//RUNTIME_DIR/$work/slate/run}
    path=${path//NAME/$ws}
    [ -s "$path" ] || fail "slate(1) says the console is logged in $path: there is no such file"
    log "the console log is where slate(1) says: $path"
}

# extract FILE: one record per example command: SOURCE-LINE, SECTION, text; NUL-separated.
extract() {
    python3 - "$1" <<'EOF'
import re, sys
path = sys.argv[1]
lines = open(path, encoding="utf-8").read().split("\n")
out = sys.stdout
def emit(lineno, section, cmd):
    cmd = re.sub(r"\s+#\s.*$", "", cmd)  # a trailing comment
    if cmd or section == "Layout":
        out.write(f"{lineno}\0{section}\0{cmd}\0")
def commands(block):  # [(lineno, text)] -> commands, continuation lines joined
    cur, start = "", None
    for n, t in block:
        if start is None:
            start = n
        if t.endswith("\\"):
            cur += t[:-1].rstrip() + " "
            continue
        cur += t.strip()
        yield start, cur
        cur, start = "", None
if path.endswith(("README",)):
    section = ""
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and re.fullmatch(r"[-=]{4,}", lines[i + 1]) and lines[i]:
            section = lines[i]
        if lines[i].startswith("    ") and (i == 0 or lines[i - 1] == ""):
            block = []
            while i < len(lines) and lines[i].startswith("    "):
                block.append((i + 1, lines[i][4:].rstrip()))
                i += 1
            if section == "Layout":
                emit(block[0][0], section, "")
                continue
            for n, cmd in commands(block):
                emit(n, section, cmd)
            continue
        i += 1
else:
    section, nf, block = "", False, []
    for i, l in enumerate(lines, 1):
        if l.startswith(".SH"):
            section = l[3:].strip().strip('"')
        elif l == ".nf":
            nf, block = True, []
        elif nf and l == ".fi":
            nf = False
            for n, cmd in commands(block):
                emit(n, section, cmd)
        elif nf:
            t = l.replace("\\-", "-").replace("\\e", "\\").replace("\\(aq", "'")
            block.append((i, t))
EOF
}

# cleanup: the README's slated (found by its lock), the workspace, the loop pool, the shares.
stop_readme_slated() {
    local pid
    for pid in $(fuser "$work/slate/state/slated.lock" 2>/dev/null); do
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
}
cleanup_readme() {
    local m d=slate-$ws
    stop_readme_slated
    virsh -q -c "$SLATE_TEST_URI" destroy "$d" >/dev/null 2>&1 || true
    virsh -q -c "$SLATE_TEST_URI" undefine --managed-save "$d" >/dev/null 2>&1 || true
    for m in $(awk -v d="$work/slate/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    detach_loops "$work/slate/state/pool.img"
}
on_exit cleanup_readme

# run_example SOURCE:LINE CMD: runs it here (eval: its exports stay), failing with its text.
run_example() {
    local where=$1 cmd=$2 rc=0 out=$work/example.out
    log "$where: $cmd"
    if [ -n "${input[$cmd]+x}" ]; then
        used[$cmd]=1
        printf '%s\n' "${input[$cmd]}" | timeout 120 bash -c "$3" >"$out" 2>&1 || rc=$?
    else
        eval "$3" </dev/null >"$out" 2>&1 || rc=$?
    fi
    sed 's/^/#   /' "$out" >&2
    [ "$rc" = 0 ] || fail "the example at $where failed (exit $rc): $cmd
$(tail -n 20 "$out")"
    if [ -n "${want_out[$cmd]+x}" ]; then
        used[$cmd]=1
        grep -qF -- "${want_out[$cmd]}" "$out" ||
            fail "the example at $where did not print '${want_out[$cmd]}': $cmd"
    fi
    if [ -n "${after[$cmd]+x}" ]; then
        used[$cmd]=1
        "${after[$cmd]}"
    fi
}

# classify SOURCE:LINE SOURCE:SECTION CMD: 0 when it is to be run, 1 when skipped (and logged).
classify() {
    local where=$1 section=$2 cmd=$3 key
    for key in "$section:" "$cmd"; do
        if [ -n "${skip[$key]+x}" ]; then
            used[$key]=1
            log "$where: SKIPPED ($cmd${cmd:+: }${skip[$key]})"
            return 1
        fi
    done
    return 0
}

ran=0
# ---- the README, from the build tree
readme=$top_srcdir/README
cd "$top_builddir"
log "README rewrites: /tmp/slate -> $work/slate, images/test/out -> $test_image_dir, dev -> $ws"
while IFS= read -r -d '' line && IFS= read -r -d '' section && IFS= read -r -d '' cmd; do
    classify "README:$line" "README:$section" "$cmd" || continue
    run=${cmd//\/tmp\/slate/$work\/slate}
    run=${run//images\/test\/out/$test_image_dir}
    [[ $run == slate\ * ]] && run=$(sed -E "s/(^| )dev( |$)/\1$ws\2/g; s/(^| )dev( |$)/\1$ws\2/g" <<<"$run")
    run_example "README:$line" "$cmd" "$run"
    ran=$((ran + 1))
done < <(extract "$readme")
[ "$ran" -ge 10 ] || fail "only $ran README examples ran: is the extraction broken?"
# What the README's examples say they do, seen from here.
[ -S "$work/slate/run/slated.sock" ] || fail "the README's slated does not serve"
"$slate" ls --json | grep -q "\"$ws\"" && fail "the README's workspace is still there after slate rm"
stop_readme_slated

# ---- the man pages' blocks (.nf/.fi), in a directory of their own
mkdir -p "$work/man"
cd "$work/man"
for f in "${!fixture[@]}"; do cp "${fixture[$f]}" "$f"; done
for page in slate.1 slated.8 slate.conf.5 slate-catalog.1 slate-catalog.5; do
    # The pages as built from doc/*.in, with this build's paths.
    src=$top_builddir/doc/$page
    [ -f "$src" ] || fail "$src is not built"
    example=$work/$page.example
    : >"$example"
    while IFS= read -r -d '' line && IFS= read -r -d '' section && IFS= read -r -d '' cmd; do
        if [[ $section == EXAMPLE* && -n ${file_check[$page]+x} ]]; then
            printf '%s\n' "$cmd" >>"$example"
            continue
        fi
        classify "$page:$line" "$page:$section" "$cmd" || continue
        run_example "$page:$line" "$cmd" "PATH=$top_builddir:\$PATH; $cmd"
        ran=$((ran + 1))
    done < <(extract "$src")
    if [ -n "${file_check[$page]+x}" ]; then
        used[$page]=1
        [ -s "$example" ] || fail "$page: its example is empty"
        log "$page: its example, checked with ${file_check[$page]}"
        sed 's/^/#   /' "$example" >&2
        # shellcheck disable=SC2086 # a command and its options
        ${file_check[$page]} "$example" || fail "$page: its example is refused"
        ran=$((ran + 1))
    fi
done

for key in "${!skip[@]}" "${!input[@]}" "${!file_check[@]}" "${!after[@]}" "${!want_out[@]}"; do
    [ -n "${used[$key]+x}" ] || fail "the table entry '$key' matches no example: update this test"
done
log "$ran examples ran, ${#skip[@]} skipped with their reasons"
