# systemd/: units, tmpfiles.d, sysusers.d (issue 10)
