#!/bin/sh
# slate-step uuid=df513ff1-e92b-45c0-bf45-dae1662efc29
# slate-step seq=20
# slate-step description=Install and enable slate-guest, slate's in-guest agent
#
# The binary is the host's own slate-guest (static, libc only), which slated's installer puts in
# $SLATE_INSTALL_DIR: the guest agent always matches the daemon that pulled the image. Its ready
# line goes to the serial console (slated waits for it there); its log goes to the journal.
set -eu
src=${SLATE_INSTALL_DIR:-/run/slate-install}/slate-guest
if [ ! -f "$src" ]; then
    echo "no slate-guest in ${src%/*}: install slate-guest on the host (see images/ubuntu-24.04/README.md)" >&2
    exit 1
fi
install -D -m 0755 -o root -g root "$src" /usr/local/sbin/slate-guest
/usr/local/sbin/slate-guest --version
cat >/etc/systemd/system/slate-guest.service <<'UNIT'
[Unit]
Description=slate guest agent (exec sessions, egress proxy and SSH agent over the host channel)
After=local-fs.target systemd-tmpfiles-setup.service

[Service]
Type=simple
ExecStart=/usr/local/sbin/slate-guest
Restart=always
RestartSec=1
# The ready line, on the serial console where slated looks for it, as a line of its own.
StandardOutput=tty
TTYPath=/dev/ttyS0
StandardError=journal

[Install]
WantedBy=multi-user.target
UNIT
chmod 0644 /etc/systemd/system/slate-guest.service
systemctl enable slate-guest.service
