#!/bin/sh
# slate-step uuid=c996d3a9-1691-40da-b14c-df5d4a7da4fd
# slate-step seq=60
# slate-step description=Leave no network path around the channel: no cloud-init, DHCP, NTP, snapd
#
# A slate domain has no network interface; a template that adds one must still not get DHCP,
# DNS, NTP, the snap store or unattended upgrades talking past the egress proxy, and no boot
# may wait for a network that never comes. cloud-init goes entirely (no datasource exists; user,
# home and network are set up here instead).
set -eu
install -d -m 0755 /etc/cloud /etc/cloud/cloud.cfg.d
: >/etc/cloud/cloud-init.disabled
printf 'network: {config: disabled}\n' >/etc/cloud/cloud.cfg.d/99-slate-no-network.cfg
rm -f /etc/netplan/*.yaml /etc/netplan/*.yml
# Masked rather than disabled: nothing may pull them in. Units this image lacks are skipped.
for unit in systemd-networkd.service systemd-networkd.socket systemd-networkd-wait-online.service \
    systemd-network-generator.service systemd-timesyncd.service NetworkManager.service \
    NetworkManager-wait-online.service ModemManager.service \
    snapd.service snapd.socket snapd.seeded.service snapd.apparmor.service \
    apt-daily.timer apt-daily-upgrade.timer unattended-upgrades.service motd-news.timer \
    ua-timer.timer esm-cache.service fwupd-refresh.timer \
    ssh.service ssh.socket; do
    for dir in /etc/systemd/system /usr/lib/systemd/system /lib/systemd/system; do
        if [ -e "$dir/$unit" ]; then
            systemctl mask "$unit"
            break
        fi
    done
done
