#!/bin/sh
# Installs the data `make demo` trains on: Debian's dataset-fashion-mnist (IDX files under
# /usr/share/datasets/fashion-mnist), when missing and we are root. `make test` does not need it.
set -eu
dir=/usr/share/datasets/fashion-mnist
[ -f "$dir/train-images-idx3-ubyte.gz" ] && [ -f "$dir/t10k-labels-idx1-ubyte.gz" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "amp: Fashion-MNIST is missing from $dir (apt-get install dataset-fashion-mnist, or run make demo as root)" >&2
    exit 1
fi
echo "amp: installing Debian's dataset-fashion-mnist"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends dataset-fashion-mnist
