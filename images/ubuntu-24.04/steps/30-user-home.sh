#!/bin/sh
# slate-step uuid=3a2afd48-51ad-4500-ba24-34961f16b854
# slate-step seq=30
# slate-step description=Create user ubuntu (uid 1000) and mount the workspace home at /home/ubuntu
#
# cloud-init, which would create the user at first boot, is off (step 60). The workspace's
# home.img is the domain's second disk (vdb): an ext4 whose root directory is the home of uid
# 1000 (doc/workspace.md). Passwordless sudo, as on Ubuntu's cloud images; no password login.
set -eu
if ! getent group ubuntu >/dev/null; then
    groupadd --gid 1000 ubuntu
fi
if ! getent passwd ubuntu >/dev/null; then
    useradd --uid 1000 --gid ubuntu --groups adm,sudo --home-dir /home/ubuntu --no-create-home \
        --shell /bin/bash --comment "slate workspace user" ubuntu
fi
if [ "$(id -u ubuntu)" != 1000 ] || [ "$(id -g ubuntu)" != 1000 ]; then
    echo "user ubuntu is $(id ubuntu), not uid/gid 1000" >&2
    exit 1
fi
passwd --lock ubuntu >/dev/null
printf 'ubuntu ALL=(ALL) NOPASSWD:ALL\n' >/etc/sudoers.d/90-slate-ubuntu
chmod 0440 /etc/sudoers.d/90-slate-ubuntu
visudo -c -q -f /etc/sudoers.d/90-slate-ubuntu
install -d -m 0750 -o ubuntu -g ubuntu /home/ubuntu
# nofail: a workspace without a home disk still boots (with an empty /home/ubuntu), and the
# boot does not wait for it; slate-guest does (its ready line means the home is there).
sed -i '\|^/dev/vdb[[:space:]]|d' /etc/fstab
echo '/dev/vdb /home/ubuntu ext4 nosuid,nodev,nofail,x-systemd.device-timeout=90s 0 2' >>/etc/fstab
install -d -m 0755 /etc/systemd/system/slate-guest.service.d
printf '[Unit]\nAfter=home-ubuntu.mount\n' >/etc/systemd/system/slate-guest.service.d/home.conf
# slated's provisioning writes the user's files below /home/slate (images/test's user): here that
# is this home.
ln -sfn ubuntu /home/slate
