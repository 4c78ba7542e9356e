#!/bin/bash
# swiftlane's idle tax, sixth look, third screen: trial = no second idle-CPU search in enqueue after
# select_cpu found none (../nokick-screen/nokick1.patch) again, trial2 = that and no wakeup preemption of
# normal tasks (nokick-nopreempt.patch); probe and cyclictest, 5 boots, order rotated
cd /work/main
for b in 1 2 3 4 5; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b \
    -variants eevdf,sched_ext-floor,swiftlane,trial,trial2 -workloads probe,cyclictest \
    -swiftlane build/swiftlane -trial build/trial-nokick1 -trial2 build/trial-nokick-nopreempt \
    -out build/screen-nopreempt/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
