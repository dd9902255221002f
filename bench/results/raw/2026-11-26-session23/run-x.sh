#!/bin/bash
cd "$(dirname "$0")/x"
{
nproc; grep -m1 "model name" /proc/cpuinfo; cat /sys/kernel/mm/transparent_hugepage/shmem_enabled; systemd-detect-virt 2>/dev/null; dmesg 2>/dev/null | grep -i -m3 hypervisor
echo "== t2 shm 32MiB"; taskset -c 2 ./t2 1 32
echo "== t2 anon 32MiB"; taskset -c 2 ./t2 0 32
for r in 1 2; do
echo "== trace_bench windows run $r"; taskset -c 2 ./trace_bench --only nostacks --runs 1 --first-lap 0 --pairs 1600000 2>&1 | grep -v "^[0-9]"
done
echo "== default"; taskset -c 2 ./trace_bench --only nostacks --runs 3 2>&1 | grep -v "win\|^[0-9]"
} > $OUT/x.log 2>&1
