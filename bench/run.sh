#!/bin/sh
# Runs fusebench with the default sizes (pass flags to change them, e.g.
# -size 64MiB -files 200 for a quick run) and writes
# bench/results/fusebench-<date>.{md,json} and the read's CPU profile, then
# nfsbench (the NFS server beside nfs-ganesha, FUSE and raw S3) with its
# defaults, which writes bench/results/nfsbench-<date>.{md,json} and the
# NFS write and read CPU profiles, then syncbench (import and export
# latency, about a minute) with its defaults, which writes
# bench/results/syncbench-<date>.{md,json}. Between nfsbench and syncbench
# it runs bench/suite, the side-by-side suite (see bench/README.md).
# Needs root (FUSE mounts, drop_caches), fuse3, and for the comparison
# nfs-ganesha with its VFS FSAL (Debian: nfs-ganesha nfs-ganesha-vfs).
set -eu
cd "$(dirname "$0")/.."
# AWS_CA_BUNDLE breaks the bucket client on this loopback store for now.
export AWS_CA_BUNDLE=
mkdir -p bench/results
go run ./bench/fusebench -out bench/results "$@"
go run ./bench/nfsbench -out bench/results
# The side-by-side suite of issue 5 (installs s3fs, rclone and fio with
# apt-get if missing); writes bench/results/suite-<date>.{md,json} and profiles.
go run ./bench/suite -out bench/results
exec go run ./bench/syncbench -out bench/results
