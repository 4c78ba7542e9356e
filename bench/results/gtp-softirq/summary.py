#!/usr/bin/env python3
# Summarises ab.sh's boot JSONs: per boot and binary, the UE RTT of swiftlane
# without strategies and in automatic mode (idle, messaging), their ratio, and
# whom automatic mode prioritised besides the gNB (comm "swiftlane").
import json, statistics, sys, os

here = os.path.dirname(os.path.abspath(__file__))
boots = sorted({int(f.split('-')[1]) for f in os.listdir(here) if f.startswith('boot-')})
for v in ('old', 'new'):
    print(v)
    ratios, autos = [], []
    for b in boots:
        d = json.load(open(f'{here}/boot-{b}-{v}.json'))['variants']
        plain = d['swiftlane-loaded']['loads']['messaging']
        auto = d['swiftlane-auto-loaded']['loads']
        others = [c for ph in auto.values() for c in ph.get('carriers', []) if not c.startswith('swiftlane ')]
        r = plain['avg_ms'] / auto['messaging']['avg_ms']
        ratios.append(r)
        autos.append(auto['messaging']['avg_ms'])
        print(f"  boot {b}: no-strategies avg {plain['avg_ms']:.2f} p99 {plain['p99_ms']:.1f} | auto avg {auto['messaging']['avg_ms']:.2f}"
              f" p99 {auto['messaging']['p99_ms']:.1f} (idle {auto['idle']['avg_ms']:.2f}) | ratio avg {r:.2f} | others prioritised {others}")
    print(f"  median ratio avg {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}); auto avg {statistics.median(autos):.2f} ({min(autos):.2f}-{max(autos):.2f})")
