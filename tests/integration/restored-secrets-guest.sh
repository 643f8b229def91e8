#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# tests/integration/secrets-guest.sh, unchanged, with its workspace started from a booted
# snapshot of the test image (doc/vm.md) instead of a boot: placeholders in the environment and
# files, none of the real values in the guest's memory or on its disks, reprovisioning while it
# runs, a second start (which boots: the disk is used). Then slated's log must show the restore
# and no fallback to a cold boot.
# Run through tests/integration/run-one, which sources lib.sh.
set -euo pipefail
export SLATE_TEST_SNAPSHOTS="2048x2"
# shellcheck source=tests/integration/secrets-guest.sh
# shellcheck disable=SC2154 # top_srcdir: run-one
source "$top_srcdir/tests/integration/secrets-guest.sh"
restored_check
echo "secrets-guest passed with its workspace restored from a booted snapshot"
