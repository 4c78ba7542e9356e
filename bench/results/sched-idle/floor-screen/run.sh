#!/bin/bash
# the sched_ext floor beside EEVDF, swiftlane and scx_bpfland: probe + messaging, 4 boots (order rotated)
cd /work/main
for b in 1 2 3 4; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b \
    -variants eevdf,sched_ext-floor,swiftlane,scx_bpfland -workloads probe,messaging \
    -swiftlane build/swiftlane -out build/screen-floor/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
