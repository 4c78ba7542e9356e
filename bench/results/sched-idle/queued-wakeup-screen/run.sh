#!/bin/bash
# screening: eevdf, swiftlane, swiftlane-queued-wakeup; probe + messaging; 4 boots (bench-sched rotates order by boot)
cd /work/main
for b in 1 2 3 4; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b -variants eevdf,swiftlane,swiftlane-queued-wakeup -workloads probe,messaging \
    -swiftlane build/swiftlane -out build/screen-qw/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
