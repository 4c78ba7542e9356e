#!/bin/bash
# screening: eevdf, swiftlane, queued_wakeup, queued_wakeup + builtin_idle, and a trial build
# (wait behind a short-burst waker, with queued_wakeup); probe + messaging; 5 boots (order rotated)
cd /work/main
for b in 1 2 3 4 5; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b \
    -variants eevdf,swiftlane,swiftlane-queued-wakeup,swiftlane-queued-wakeup-builtin-idle,trial -workloads probe,messaging \
    -swiftlane build/swiftlane -trial build/exp-affine-swiftlane -trial-config 'queued_wakeup: true' \
    -out build/screen-qw2/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
