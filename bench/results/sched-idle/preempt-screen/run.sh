#!/bin/bash
# swiftlane's idle tax, sixth look: trial = the periodic wakeup-preemption rule spares a running task that
# itself runs briefly (shortrun.patch), trial2 = that and no second idle-CPU search in enqueue after
# select_cpu found none (nokick.patch); probe and cyclictest (beside hogs), 5 boots, order rotated
cd /work/main
for b in 1 2 3 4 5; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b \
    -variants eevdf,sched_ext-floor,swiftlane,trial,trial2 -workloads probe,cyclictest \
    -swiftlane build/swiftlane -trial build/trial-shortrun -trial2 build/trial-nokick \
    -out build/screen-preempt/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
