#!/bin/sh
# slate-step uuid=9440bbb5-6a9d-496f-9ae7-a9c720b450ac
# slate-step seq=40
# slate-step description=Trust slate's egress CA: system store, Node, Python requests, pip, curl, git
#
# The CA itself is per installation and arrives at every start: `slate-guest --provision` writes
# /usr/local/share/ca-certificates/slate-egress.crt and runs update-ca-certificates, which puts it
# in the system bundle. What is left is to point the runtimes that keep their own trust store at
# that bundle: Node (NODE_EXTRA_CA_CERTS), Python requests and pip (their certifi copy), and,
# explicitly, curl, git and OpenSSL users. (Images without git get the variable only.)
set -eu
bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -x /usr/sbin/update-ca-certificates ]; then
    echo "ca-certificates is not installed: the egress CA could not be trusted" >&2
    exit 1
fi
install -d -m 0755 /usr/local/share/ca-certificates
vars="NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE PIP_CERT SSL_CERT_FILE CURL_CA_BUNDLE GIT_SSL_CAINFO"
# /etc/environment: PAM sessions (login, su, sudo, cron). /etc/profile.d: login shells.
for v in $vars; do
    sed -i "/^$v=/d" /etc/environment
    echo "$v=$bundle" >>/etc/environment
done
{
    echo "# slate: TLS clients trust the system store, which holds slate's egress CA."
    for v in $vars; do echo "export $v=$bundle"; done
} >/etc/profile.d/slate-ca.sh
chmod 0644 /etc/profile.d/slate-ca.sh
# git's own setting, for programs started without either (pip's: step 50).
if command -v git >/dev/null; then
    git config --system http.sslCAInfo "$bundle"
fi
