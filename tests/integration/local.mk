# Integration tests: real libvirtd, real QEMU (KVM or TCG), real loop-mounted btrfs/XFS.
# Each test is a shell script that tests/integration/run-one (the LOG_COMPILER) sources after
# tests/integration/lib.sh; run-one skips them (exit 77, with the reason) when integration tests are
# disabled or make check does not run as root.
integration_tests += tests/integration/boot-test-image.sh tests/integration/daemon.sh \
	tests/integration/workspaces.sh
EXTRA_DIST += tests/integration/run-one tests/integration/lib.sh $(integration_tests)

# The guest channel end to end: exec, shell PTYs, run --rm, proven-boot checkpoints.
integration_tests += tests/integration/exec.sh

# Secrets as the guest sees them: provisioned placeholders, and no real value in the guest's
# environment, files, memory or disks.
integration_tests += tests/integration/secrets-guest.sh
