#!/bin/bash
# where swiftlane's idle tax is: the floor, swiftlane, trial = swiftlane without the cgroup-weight work (every task weighted as the root cgroup's),
# trial2 = swiftlane without wakeup preemption of normal tasks; probe only, 5 boots (order rotated)
cd /work/main
for b in 1 2 3 4 5; do
  echo "== boot $b $(date -u +%T)"
  bash lab/vm.sh --timeout 2400 --kernel newest -- build/bench-sched -boot $b \
    -variants eevdf,sched_ext-floor,swiftlane,trial,trial2 -workloads probe \
    -swiftlane build/swiftlane -trial build/trial-nocg -trial2 build/trial-nopreempt \
    -out build/screen-trials-2/boot-$b.json 2>&1 | tail -30
done
echo "== done $(date -u +%T)"
