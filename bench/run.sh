#!/usr/bin/env bash
# Prints every benchmark figure of the guest platform (nothing is asserted).
set -euo pipefail
cd "$(dirname "$0")/.."
export CPUOS_GUEST_DIR=${CPUOS_GUEST_DIR:-$PWD/build/guest}
export CPUOS_RUN_DIR=${CPUOS_RUN_DIR:-/tmp/cpuos-bench-run}
mkdir -p "$CPUOS_RUN_DIR"
echo "accelerator: $(build/tests/test_qemu qemu_accel | sed -n 's/.*auto picks \(.*\) on this host/\1/p')"
build/bench/bench_vm boot 10
build/bench/bench_vm exec 200
build/bench/bench_vm files 200
build/bench/bench_vm memory 3
build/bench/bench_api create 10
build/bench/bench_api exec 200
build/bench/bench_api concurrent 20
build/bench/bench_api hostile 100
build/bench/bench_snap
python3 bench/bench_net.py 10
python3 bench/bench_jail.py 10
python3 bench/bench_pool.py 10
python3 bench/bench_code.py 5
python3 bench/bench_gateway.py 500
python3 bench/bench_e2b.py 15
python3 bench/bench_objstore.py 6
python3 bench/bench_cluster.py 5
python3 bench/bench_move.py 3
python3 bench/bench_placement.py 100 10000
python3 bench/bench_images.py 3
