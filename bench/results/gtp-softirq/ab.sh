#!/bin/bash
# A/B of how the tracer tells a softirq: fentry/fexit on net_rx_action (old,
# b2e43d4) against the preempt count (new), under the messaging load, in one
# boot, order rotated by boot.
b=$1
out=/work/main/bench/results/gtp-softirq
if (( b % 2 )); then order="old new"; else order="new old"; fi
for v in $order; do
  bin=/work/main/build/gtp-$v/swiftlane
  [[ $v = new ]] && bin=/work/main/build/gtp/swiftlane
  echo "== boot $b: $v ($bin)"
  /work/main/build/gtp/bench-gtp -boot $b -swiftlane $bin -variants swiftlane-loaded,swiftlane-auto-loaded \
    -loads messaging -restarts 0 -out $out/boot-$b-$v.json -logdir /work/main/.cache/gtp-softirq/logs-$b-$v 2>&1 | grep -E "^bench: swiftlane|error|Error" 
done
