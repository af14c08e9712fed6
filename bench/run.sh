#!/bin/sh
# Runs fusebench with the default sizes (pass flags to change them, e.g.
# -size 64MiB -files 200 for a quick run) and writes
# bench/results/fusebench-<date>.{md,json} and the read's CPU profile, then
# syncbench (import and export latency, about a minute) with its defaults,
# which writes bench/results/syncbench-<date>.{md,json}.
# Needs root (FUSE mounts, drop_caches) and fuse3.
set -eu
cd "$(dirname "$0")/.."
# AWS_CA_BUNDLE breaks the bucket client on this loopback store for now.
export AWS_CA_BUNDLE=
mkdir -p bench/results
go run ./bench/fusebench -out bench/results "$@"
exec go run ./bench/syncbench -out bench/results
