#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# slate cp on the test image under TCG: a file and a directory tree into the guest and back out
# (contents, modes, symlinks, the copy owned by the workspace user in the guest), renaming onto
# a new name and replacing a file, tar streams on stdin and stdout, --json totals, clear errors
# for bad specs and missing paths, and a hostile guest: tar replaced by root in the guest with
# one that sends entries outside the asked-for name, through "..", over a symlink, as absolute
# paths and as device nodes -- nothing lands outside the destination.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail

ensure_libvirt
ensure_test_image

ws=cp$$
on_exit destroy_domains "slate-$ws"
on_exit stop_slated

mnt=$(make_loop_fs btrfs cp 3G)
state=$mnt/state
start_slated
import_test_image
s create $ws --memory 512 --cpus 1 --home-size 1G >/dev/null
s start $ws >/dev/null 2>"$work/err" || fail "start: $(cat "$work/err")"

# A tree with a nested directory, an executable, an empty file, a symlink and binary data.
src=$work/src/tree
mkdir -p "$src/sub/deeper"
head -c 3000000 /dev/urandom >"$src/blob"
printf '#!/bin/sh\necho hi\n' >"$src/sub/run.sh"
chmod 0755 "$src/sub/run.sh"
: >"$src/sub/deeper/empty"
ln -s ../blob "$src/sub/link"

# Into the guest: a directory into an existing directory (home, relative path).
s cp "$src" $ws:. 2>"$work/err" || fail "cp DIR ws:.: $(cat "$work/err")"
[ "$(s exec $ws -- sha256sum tree/blob | cut -d' ' -f1)" = "$(sha256sum <"$src/blob" | cut -d' ' -f1)" ] ||
    fail "tree/blob differs in the guest"
[ "$(s exec $ws -- readlink tree/sub/link)" = ../blob ] || fail "the symlink was not kept"
[ "$(s exec $ws -- tree/sub/run.sh)" = hi ] || fail "the executable bit was lost"
[ "$(s exec $ws -- stat -c %u:%g tree/blob)" = "$(s exec $ws -- sh -c 'echo $(id -u):$(id -g)')" ] ||
    fail "the copy is not the workspace user's: $(s exec $ws -- stat -c %u:%g tree/blob)"
s exec $ws -- test -f tree/sub/deeper/empty || fail "the empty file is missing"

# A file under a new name (absolute path), then replacing it.
echo first >"$work/one"
s cp "$work/one" $ws:/tmp/renamed 2>"$work/err" || fail "cp FILE ws:/tmp/renamed: $(cat "$work/err")"
[ "$(s exec $ws -- cat /tmp/renamed)" = first ] || fail "the renamed file"
echo second >"$work/one"
s cp "$work/one" $ws:/tmp/renamed || fail "replacing a file"
[ "$(s exec $ws -- cat /tmp/renamed)" = second ] || fail "the file was not replaced"
s exec $ws -- sh -c 'ls -a /tmp | grep -q slate-cp' && fail "a staging directory was left in /tmp"
want_status 1 s cp "$src" $ws:/tmp/renamed
grep -q "cannot overwrite non-directory" "$work/err" || fail "dir onto a file: $(cat "$work/err")"
want_status 1 s cp "$work/one" $ws:/no/such/dir/x
grep -q "no such directory" "$work/err" || fail "into a missing directory: $(cat "$work/err")"
want_status 1 s cp "$work/one" $ws:/root/x
grep -qi "denied" "$work/err" || fail "into root's home as the user: $(cat "$work/err")"

# Out of the guest: the tree into a directory, and under a new name; byte for byte the same.
mkdir "$work/back"
s cp $ws:tree "$work/back" 2>"$work/err" || fail "cp ws:tree DIR: $(cat "$work/err")"
diff -r "$src" "$work/back/tree" || fail "the tree came back different"
[ "$(readlink "$work/back/tree/sub/link")" = ../blob ] || fail "the symlink came back different"
[ -x "$work/back/tree/sub/run.sh" ] || fail "the executable bit came back lost"
s cp $ws:/tmp/renamed "$work/back/file.txt" --json >"$work/cp.json" || fail "cp ws:FILE NEWNAME"
[ "$(cat "$work/back/file.txt")" = second ] || fail "the file copied out under a new name"
[ "$(jget files <"$work/cp.json")" = 1 ] && [ "$(jget bytes <"$work/cp.json")" = 7 ] ||
    fail "--json: $(cat "$work/cp.json")"
want_status 1 s cp $ws:/no/such "$work/back"
grep -q "no/such\|such" "$work/err" || fail "a missing guest path: $(cat "$work/err")"
want_status 1 s cp $ws:/tmp/renamed "$work/nope/x"
grep -q "no such directory" "$work/err" || fail "a missing host directory: $(cat "$work/err")"

# Tar streams: stdout, and stdin into a directory.
s cp $ws:tree - >"$work/tree.tar" || fail "cp ws:tree -"
tar -tf "$work/tree.tar" | grep -qx "tree/sub/run.sh" || fail "the stream on stdout: $(tar -tf "$work/tree.tar" | head)"
s exec $ws -- mkdir -p /tmp/in
s cp - $ws:/tmp/in <"$work/tree.tar" || fail "cp - ws:/tmp/in"
[ "$(s exec $ws -- sha256sum /tmp/in/tree/blob | cut -d' ' -f1)" = "$(sha256sum <"$src/blob" | cut -d' ' -f1)" ] ||
    fail "the stream on stdin"

# Bad specs.
expect_fail 2 "one of SRC and DEST must be NAME:PATH" s cp "$work/one" "$work/two"
expect_fail 2 "through the host" s cp $ws:a $ws:b
expect_fail 2 "give a path after" s cp "$work/one" $ws:
expect_fail 2 "invalid name" s cp "$work/one" 'Bad_Name:x'
expect_fail 2 "both want stdout" s cp --json $ws:tree -
want_status 1 s cp "$work/missing" $ws:.
grep -q "No such file" "$work/err" || fail "a missing host file: $(cat "$work/err")"
# "./a:b" is a host path with a colon, not a workspace.
echo colon >"$work/a:b"
(cd "$work" && s cp ./a:b $ws:/tmp/) || fail "a host path with a colon"
[ "$(s exec $ws -- cat /tmp/a:b)" = colon ] || fail "the file with a colon"

# A hostile guest: root makes 'slate cp' out of the guest send a crafted archive.
# Each entry tries to land outside the destination; none may.
mkdir -p "$work/evil/x"
(cd "$work/evil" && {
    python3 - <<'EOF'
import io, tarfile
def add(t, name, data=b"pwned\n", **kw):
    i = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(i, k, v)
    if i.type == tarfile.REGTYPE:
        i.size = len(data)
        t.addfile(i, io.BytesIO(data))
    else:
        t.addfile(i)
for case in ("outside", "dotdot", "absolute", "symlink", "device", "hardlink"):
    with tarfile.open(f"{case}.tar", "w", format=tarfile.GNU_FORMAT) as t:
        add(t, "x", type=tarfile.DIRTYPE, mode=0o755)
        if case == "outside":
            add(t, "y-escaped")
        elif case == "dotdot":
            add(t, "x/../../dotdot-escaped")
        elif case == "absolute":
            add(t, "/tmp/absolute-escaped")
        elif case == "symlink":
            add(t, "x/l", type=tarfile.SYMTYPE, linkname="../..")
            add(t, "x/l/symlink-escaped")
        elif case == "device":
            add(t, "x/dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
            add(t, "x/suid", mode=0o4755)
        elif case == "hardlink":
            add(t, "x/h", type=tarfile.LNKTYPE, linkname="../../outside-target")
            add(t, "x/h")
EOF
})
for case in outside dotdot absolute symlink device hardlink; do
    s cp "$work/evil/$case.tar" $ws:/tmp/$case.tar >/dev/null
done
# busybox sh runs its tar applet whatever PATH says, so the hostile guest replaces sh itself:
# every 'sh -c SCRIPT slate-cp ...' answers with the crafted archive.
s exec --user root $ws -- sh -c 't=$(which sh); rm -f "$t"; cat >"$t" <<"EOF"
#!/bin/busybox sh
[ "$3" = slate-cp ] && exec /bin/busybox cat /tmp/$(/bin/busybox cat /tmp/evil-case).tar
exec /bin/busybox sh "$@"
EOF
/bin/busybox chmod 755 "$t"; mkdir -p /tmp/x' || fail "installing the hostile sh"
echo 'innocent' >"$work/outside-target"
for case in outside dotdot absolute symlink device hardlink; do
    s exec --user root $ws -- sh -c "echo $case >/tmp/evil-case"
    rm -rf "$work/land" && mkdir -p "$work/land/in"
    rm -rf "$work"/*escaped* /tmp/absolute-escaped
    s cp $ws:/tmp/x "$work/land/in" >"$work/out" 2>"$work/err" && st=0 || st=$?
    log "hostile $case: exit $st: $(tr '\n' ' ' <"$work/err")"
    found=$(find "$work" /tmp/absolute-escaped -name '*escaped*' -not -path "$work/land/in/x/*" 2>/dev/null || true)
    [ -z "$found" ] || fail "hostile $case: the guest wrote outside the destination: $found"
    [ "$(cat "$work/outside-target")" = innocent ] || fail "hostile $case: wrote through a hard link"
    case $case in
    outside | dotdot | absolute | hardlink)
        [ $st -ne 0 ] || fail "hostile $case: cp succeeded"
        grep -q "refused" "$work/err" || fail "hostile $case: no refusal: $(cat "$work/err")" ;;
    symlink)
        [ $st -ne 0 ] || fail "hostile symlink: cp succeeded" ;;
    device)
        [ ! -e "$work/land/in/x/dev" ] || fail "hostile device: a device node was made"
        [ -e "$work/land/in/x/suid" ] && [ ! -u "$work/land/in/x/suid" ] ||
            fail "hostile device: the set-uid bit came along" ;;
    esac
done
log "cp: all cases passed"
