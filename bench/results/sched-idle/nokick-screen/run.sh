#!/bin/bash
# swiftlane's idle tax, sixth look, second screen: trial = no second idle-CPU search in enqueue after
# select_cpu found none (nokick1.patch), trial2 = the same build with builtin_idle: true (the kernel's
# idle-CPU selection, which keeps a sync wakee on its waker's CPU); probe and cyclictest, 5 boots, order rotated
cd /work/main
for b in 1 2 3 4 5; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b \
    -variants eevdf,sched_ext-floor,swiftlane,trial,trial2 -workloads probe,cyclictest \
    -swiftlane build/swiftlane -trial build/trial-nokick1 -trial2 build/trial-nokick1 -trial2-config "builtin_idle: true" \
    -out build/screen-nokick/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
