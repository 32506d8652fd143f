#!/usr/bin/env bash
# Installs the Debian 12 packages that tide's build, tests and demo need.
# A quick no-op when everything is present (one dpkg-query, no apt-get).
set -euo pipefail

PKGS=(
    # build
    build-essential cmake pkg-config
    libuv1-dev protobuf-c-compiler libprotobuf-c-dev libnghttp2-dev libhttp-parser-dev
    libsqlite3-dev libcjson-dev libcurl4-openssl-dev uthash-dev
    # MPI jobs and the reference trainer (tide-mlp)
    libopenmpi-dev openmpi-bin libssl-dev
    # tests
    libcmocka-dev python3-grpcio python3-protobuf python3-grpc-tools python3-yaml prometheus
    # an unmodified PyTorch DDP job (integration tests; CPU build, gloo)
    python3-torch
    # fuzzing (clang's libFuzzer runtime) and sanitizers
    clang libclang-rt-14-dev
    # deployment tests: etcd for the store and HA schedulers, Slurm daemons for the sbatch template
    etcd-server etcd-client slurm-wlm munge unzip
    # make bench: the plots on docs/performance.md
    gnuplot-nox
)

missing=()
for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$st" = installed ] || missing+=("$p")
done

here=$(dirname "$0")
if [ ${#missing[@]} -eq 0 ]; then
    "$here/helm.sh"
    exit 0
fi

echo "deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
"$here/helm.sh"
