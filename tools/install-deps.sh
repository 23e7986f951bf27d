#!/bin/sh
# Installs the Debian packages amp's build and tests need, when they are missing and we are root.
# Called by `make test` and `make demo`, so both work on a fresh Debian 12 machine.
set -eu
need=""
command -v cc >/dev/null 2>&1 || need="$need gcc libc6-dev"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
command -v jq >/dev/null 2>&1 || need="$need jq"
[ -f /usr/include/zlib.h ] || need="$need zlib1g-dev"
[ -f /usr/include/cjson/cJSON.h ] || need="$need libcjson-dev"
[ -f /usr/include/pcre2.h ] || need="$need libpcre2-dev"
[ -f /usr/include/plplot/plplot.h ] || need="$need libplplot-dev plplot-driver-cairo"
[ -n "$need" ] || exit 0
if [ "$(id -u)" != 0 ]; then
    echo "amp: missing packages:$need (install them, or run make as root to install them automatically)" >&2
    exit 1
fi
echo "amp: installing Debian packages:$need"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $need
