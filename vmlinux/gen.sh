#!/bin/sh
# Regenerate vmlinux/<arch>/vmlinux.h from the running kernel's BTF. Never edit the output by hand.
set -e
arch=$(uname -m)
case "$arch" in x86_64) dir=x86 ;; aarch64) dir=arm64 ;; *) dir=$arch ;; esac
mkdir -p "$(dirname "$0")/$dir"
bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$(dirname "$0")/$dir/vmlinux.h"
echo "wrote $(dirname "$0")/$dir/vmlinux.h"
