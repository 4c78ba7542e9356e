#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a latency phase's slowest 1 % sit in time, from bench-lb's -times-dir.

  python3 bench/lb/slow_samples.py DIR

Per phase file: samples, p50, p99, max (µs); how many samples are at or over
the p99; the share of those within 20 ms of another one (a burst, as a host
or vCPU pause gives, rather than scattered per-connection costs); and their
count in each half second of a 5 s period (the session sweep's interval, so a
stall at every sweep shows as one tall bin).
"""
import glob, os, sys
for f in sorted(glob.glob(sys.argv[1]+"/*.txt")):
    rows=[]
    for l in open(f):
        if l.startswith("#"): continue
        a=l.split()
        if len(a)==2: rows.append((float(a[0]),float(a[1])))
    if not rows: continue
    lat=sorted(r[1] for r in rows); n=len(lat)
    p99=lat[int(n*0.99)]; p50=lat[n//2]
    slow=[r for r in rows if r[1]>=p99]
    # clustering: fraction of slow samples within 20ms of another slow one
    ts=sorted(r[0] for r in slow)
    near=sum(1 for i,t in enumerate(ts) if (i>0 and t-ts[i-1]<20000) or (i+1<len(ts) and ts[i+1]-t<20000))
    # mod 5s phase histogram (10 bins of 0.5s)
    bins=[0]*10
    for t in ts: bins[int((t/1e6)%5/0.5)]+=1
    print(f"{os.path.basename(f):28s} n={n} p50={p50:.0f} p99={p99:.0f} max={lat[-1]:.0f} slow={len(slow)} clustered={near/len(ts):.2f} mod5s={bins}")
