#!/bin/bash
for g in 4 2; do
  echo "== groups $g"
  /work/main/build/gtp/bench-gtp -boot 1 -swiftlane /work/main/build/gtp/swiftlane -variants swiftlane-loaded,swiftlane-auto-loaded \
    -loads messaging -restarts 0 -messaging-groups $g -out /work/main/.cache/gtp-groups/g$g.json -logdir /work/main/.cache/gtp-groups/logs-$g 2>&1 | grep -E "^bench: swiftlane|error|Error"
done
