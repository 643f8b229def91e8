# Integration tests: real libvirtd, real QEMU (KVM or TCG), real loop-mounted btrfs/XFS.
# Each test is a shell script that tests/integration/run-one (the LOG_COMPILER) sources after
# tests/integration/lib.sh; run-one skips them (exit 77, with the reason) when integration tests are
# disabled or make check does not run as root.
integration_tests += tests/integration/boot-test-image.sh tests/integration/daemon.sh \
	tests/integration/workspaces.sh
EXTRA_DIST += tests/integration/run-one tests/integration/lib.sh $(integration_tests)

# The guest channel end to end: exec, shell PTYs, run --rm, proven-boot checkpoints.
integration_tests += tests/integration/exec.sh
integration_tests += tests/integration/cp.sh
integration_tests += tests/integration/concurrent.sh

# slate probe and slate doctor --residue in real guests on btrfs, XFS, the pool and qcow2 (clean),
# and on a home allocated without zeroing (the marker found); doc/residue.md.
integration_tests += tests/integration/probe.sh

# Shares that cannot reach past their directory: symlink swaps between create and start, and
# guest root on a share served by a virtiofsd that runs as the share's owner (doc/security.md, "Shares").
integration_tests += tests/integration/shares.sh

# Secrets as the guest sees them: provisioned placeholders, and no real value in the guest's
# environment, files, memory or disks.
integration_tests += tests/integration/secrets-guest.sh

# AWS SigV4 re-signing from inside the guest: curl signs with the placeholders, slated re-signs,
# tests/integration/s3server.py verifies with the real key (doc/sigv4.md).
integration_tests += tests/integration/sigv4-guest.sh

# Installer domains a crashed slated left running: swept at start, only this state directory's.
integration_tests += tests/integration/installer-sweep.sh

# A slow libvirt (a proxy that holds domain definitions back): start streams keep-alives and
# succeeds, and a client that goes away mid-start leaves no half-started domain.
integration_tests += tests/integration/slow-libvirt.sh
EXTRA_DIST += tests/integration/slow-libvirt.py

# The README's and the man pages' examples run as written against the test image, from the build
# tree; a block that cannot run here is skipped by name with its reason.
integration_tests += tests/integration/doc-examples.sh

# Nothing hangs: exec, shell and run end with their own status when the workspace is paused,
# quarantined, stopped or its guest stops answering; a second Ctrl-C or SIGTERM ends the client.
integration_tests += tests/integration/exec-hang.sh

# The GitLab Runner custom executor driver (slate ci gitlab) playing gitlab-runner's sequence
# against a real HTTPS git server (lighttpd + git http-backend on 127.0.0.1): the clone works
# through the proxy, no real token in the guest, exit codes, nothing left after a killed job.
integration_tests += tests/integration/ci-gitlab.sh

# slate --host ssh://: the client through a real sshd on 127.0.0.1 to a second local user's
# "slate system dial-stdio" (exec, PTYs, console, permissions, ssh failures).
integration_tests += tests/integration/remote-ssh.sh

# slate-guest --probe, the guest half of slate probe (doc/residue.md), driven by hand through
# slate exec: regions clean on a fresh workspace and put back, refusals, thawing after a killed
# probe, e2fsck-clean file systems.
integration_tests += tests/integration/probe-guest.sh
EXTRA_DIST += tests/integration/probe-guest.py

# slate-guest --identity, the identity a guest restored from a snapshot gets (doc/guest-channel.md):
# clock, hostname, machine id, RNG seed and the home mount, driven by hand through slate exec.
integration_tests += tests/integration/identity-guest.sh

# A workspace's browser VM (issue 24, doc/browser.md): DevTools at 127.0.0.1:9222 in the
# workspace's guest, a CDP session through the proxy, a screenshot, nothing left after stop,
# the workspace's stop or a slated killed with -9; --persist keeps a cookie on an encrypted disk
# that holds none of it in the clear, and wipe-home drops it.
integration_tests += tests/integration/browser.sh
EXTRA_DIST += tests/integration/cdp-client.py tests/integration/png-red.py

# Watching and taking over the browser (slate browser NAME view): VNC on a unix socket that
# slated bridges to DevTools; an RFB client reads a red page, clicks, reads it green; the
# socket's mode, another uid refused, no TCP listener, nothing left after stop.
integration_tests += tests/integration/browser-view.sh

# slate-guest's browser VM side (doc/guest-channel.md, "The browser VM") in a workspace of the
# browser image, through slate exec -- slate-guest --browser: Chromium as uid 1000 in its own
# sandbox, the egress CA, stop and exit, and the LUKS2 profile on the workspace's /dev/vdb.
integration_tests += tests/integration/browser-guest.sh

# lib.sh keeps the booted snapshots its tests restore from (SLATE_TEST_SNAPSHOTS) here, one per
# key, made by the first test that needs one.
clean-local: clean-snapshot-cache
clean-snapshot-cache:
	rm -rf $(top_builddir)/tests/integration/snapshot-cache
.PHONY: clean-snapshot-cache
