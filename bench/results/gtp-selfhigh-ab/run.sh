#!/bin/bash
# Same-boot A/B of swiftlane's own process in the high class (4721e0e) against c2bd44e:
# automatic mode under both loads, 12 gNB restarts each. $1: boot number (odd: new first).
b=$1; out=/work/main/build/selfab; mkdir -p $out
order="new base"; [ $((b % 2)) = 1 ] || order="base new"
for v in $order; do
  bin=/work/main/build/swiftlane; [ $v = base ] && bin=/work/main/build/exp/base/swiftlane
  echo "== $v ($bin)"
  /work/main/build/bench-gtp -boot $b -upf gtp5g -swiftlane $bin -variants swiftlane-auto-loaded -loads both -restarts 12 \
    -logdir $out/logs-$v-$b -out $out/$v-boot-$b.json 2>&1 | grep -E "restart|bench-gtp|error|Error" | tail -20
done
