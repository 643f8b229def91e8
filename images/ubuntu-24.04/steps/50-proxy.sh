#!/bin/sh
# slate-step uuid=02d45caa-ecad-4ed6-ba9d-95a46aaa2d06
# slate-step seq=50
# slate-step description=Send HTTP(S) through slate's guest-local proxy; SSH agent at /run/slate
#
# slate-guest serves the egress proxy on 127.0.0.1:3128 and the SSH agent on
# /run/slate/ssh-agent.sock; both lead over the host channel to slated. Environment for PAM
# sessions and login shells, and each tool's own setting for programs started without it: apt,
# git, npm and pip (whose files also name the system CA bundle, step 40).
set -eu
proxy=http://127.0.0.1:3128
no_proxy=localhost,127.0.0.1,::1
set_env() {
    sed -i "/^$1=/d" /etc/environment
    echo "$1=$2" >>/etc/environment
}
for v in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY npm_config_proxy npm_config_https_proxy; do
    set_env "$v" "$proxy"
done
set_env no_proxy "$no_proxy"
set_env NO_PROXY "$no_proxy"
set_env SSH_AUTH_SOCK /run/slate/ssh-agent.sock
cat >/etc/profile.d/slate-proxy.sh <<PROFILE
# slate: HTTP(S) leaves through slate-guest's proxy; SSH signs through slate's agent.
export http_proxy=$proxy https_proxy=$proxy HTTP_PROXY=$proxy HTTPS_PROXY=$proxy
export npm_config_proxy=$proxy npm_config_https_proxy=$proxy
export no_proxy=$no_proxy NO_PROXY=$no_proxy
export SSH_AUTH_SOCK=/run/slate/ssh-agent.sock
PROFILE
chmod 0644 /etc/profile.d/slate-proxy.sh
cat >/etc/apt/apt.conf.d/90slate-proxy <<APT
// slate: apt fetches through slate-guest's proxy.
Acquire::http::Proxy "$proxy";
Acquire::https::Proxy "$proxy";
APT
if command -v git >/dev/null; then
    git config --system http.proxy "$proxy"
fi
cat >/etc/pip.conf <<PIP
[global]
proxy = $proxy
cert = /etc/ssl/certs/ca-certificates.crt
PIP
chmod 0644 /etc/pip.conf
cat >/etc/npmrc <<NPM
proxy=$proxy
https-proxy=$proxy
cafile=/etc/ssl/certs/ca-certificates.crt
NPM
chmod 0644 /etc/npmrc
