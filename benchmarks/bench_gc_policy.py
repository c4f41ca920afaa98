"""Which entries should `gc --max-size` evict? LRU against `--policy cost`, on a replayed trace.

A synthetic but realistic access trace: 500 step runs of 15 pipelines (10 chained steps each,
150 results), the pipelines used in phases (a working set of 3 to 5 that drifts, one of them
the favourite of its phase, and now and then an old one again). Each result has a size and a
compute time drawn with a spread (log-normal: sizes around 2 GB, from ~100 MB to ~30 GB;
compute times around 5 minutes, from seconds to hours), independently: a tokenizer's output is
slow to make and small, a padding or format step fast and large.

The replay keeps a simulated cache: a step whose result is cached is a hit; otherwise it is
computed, its compute time recorded as the tracer records it (a step record with a `compute`
part), and when it had been computed before, that time is *lost* (the first computation is
needed whatever the policy). After each pipeline run, gc's own planner (`build_plan`, with the
recorded costs from `recompute_costs`) evicts until the cache is under the size limit, once with
`--policy lru` and once with `--policy cost`, at the same limit (a fifth of all results' bytes:
less than the working set). Printed per seed: recompute hours lost by each and their ratio; then
the ratio of the totals over every seed (goal: at most 0.70, i.e. 30% fewer), with the median and
spread of the per-seed ratios. A seed where cost loses more is a phase whose results were cheap
per GB: cost keeps an expensive result however long it goes unused (`--older-than` with
`--max-size` ages such results out).

    python benchmarks/bench_gc_policy.py [--steps 500] [--seeds 10] [--limit 0.2]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

GB = 10**9


@dataclass(frozen=True)
class Step:
    fingerprint: str
    size: int
    seconds: float


def make_trace(
    seed: int, steps: int = 500, pipelines: int = 15, length: int = 10
) -> tuple[list[Step], list[Step]]:
    """(every result, the accesses in order): pipelines of `length` chained steps run in phases."""
    rng = random.Random(seed)
    results = [
        [
            Step(
                f"{p:02d}{i:02d}{rng.getrandbits(48):012x}",
                int(2 * GB * rng.lognormvariate(0, 1.0)),
                300 * rng.lognormvariate(0, 1.3),
            )
            for i in range(length)
        ]
        for p in range(pipelines)
    ]
    trace: list[Step] = []
    working = rng.sample(range(pipelines), 4)
    while len(trace) < steps:
        if rng.random() < 0.15:  # the working set drifts: one pipeline leaves, another comes
            working[rng.randrange(len(working))] = rng.randrange(pipelines)
        # the favourite of the phase runs most; an old pipeline now and then
        p = (
            working[0]
            if rng.random() < 0.4
            else rng.choice(working)
            if rng.random() < 0.9
            else rng.randrange(pipelines)
        )
        trace.extend(results[p])
    return [s for r in results for s in r], trace[:steps]


def replay(trace: list[Step], limit: int, policy: str, root: Path) -> tuple[float, int, int]:
    """(recompute seconds lost, misses, evictions) of `trace` under gc `--max-size limit --policy`."""
    from cachetool.cache.layout import Kind
    from cachetool.cache.model import CacheFile, CacheReport, Entry
    from cachetool.history.ledger_stats import recompute_costs
    from cachetool.history.records.parts import Compute
    from cachetool.history.records.steps import TransformRecord
    from cachetool.maintenance.gc import GcOptions
    from cachetool.maintenance.gc.plan import Rules, build_plan
    from cachetool.maintenance.liveness import InUse

    options = GcOptions(max_size=limit, policy=policy, min_age=0)
    uid = os.geteuid()
    cached: dict[str, Entry] = {}
    records: list[TransformRecord] = []
    computed: set[str] = set()
    lost = 0.0
    misses = evictions = 0
    t0 = 1_800_000_000.0
    for n, step in enumerate(trace):
        now = t0 + 60.0 * n
        fp = step.fingerprint
        path = root / f"cache-{fp}.arrow"
        if fp in cached:
            cached[fp] = Entry(Kind.DERIVED, path, cached[fp].files, fingerprint=fp, last_used=now)
            continue
        misses += 1
        if fp in computed:
            lost += step.seconds
        computed.add(fp)
        records.append(
            TransformRecord(
                time=now,
                result=fp,
                cache="miss",
                operation="map",
                compute=Compute(step.seconds, step.seconds),
            )
        )
        cached[fp] = Entry(
            Kind.DERIVED, path, (CacheFile(path, step.size, now, uid=uid),), fingerprint=fp, last_used=now
        )
        if (n + 1) % 10 and n + 1 != len(trace):
            continue  # gc runs after each pipeline run
        report = CacheReport(root, (), tuple(cached.values()))
        if report.size <= limit:
            continue
        rules = Rules(options, InUse(), now=now + 1)
        plan = build_plan(report, rules, costs=recompute_costs(records))
        for item in plan.items:
            cached.pop(str(item.fingerprint))
            evictions += 1
    return lost, misses, evictions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--limit", type=float, default=0.2, help="size limit, a share of all results' bytes")
    ns = parser.parse_args()
    print(f"{ns.steps} steps replayed per seed, limit {ns.limit:.0%} of all results' bytes")
    print(f"{'seed':>4}  {'limit':>7}  {'lost lru':>9}  {'lost cost':>9}  {'misses lru/cost':>15}  cost/lru")
    totals = [0.0, 0.0]
    ratios = []
    for seed in range(ns.seeds):
        results, trace = make_trace(seed, ns.steps)
        limit = int(ns.limit * sum(s.size for s in results))
        lru = replay(trace, limit, "lru", Path("/bench/cache"))
        cost = replay(trace, limit, "cost", Path("/bench/cache"))
        totals[0] += lru[0]
        totals[1] += cost[0]
        ratio = f"{cost[0] / lru[0]:.3f}" if lru[0] else "-"
        if lru[0]:
            ratios.append(cost[0] / lru[0])
        print(
            f"{seed:>4}  {limit / GB:>5.0f}GB  {lru[0] / 3600:>8.1f}h  {cost[0] / 3600:>8.1f}h  "
            f"{lru[1]:>7} / {cost[1]:<5}  {ratio}"
        )
    lost = f"lru {totals[0] / 3600:.1f}h, cost {totals[1] / 3600:.1f}h"
    print(
        f"recompute hours lost over {ns.seeds} seeds: {lost}; "
        f"ratio cost/lru = {totals[1] / totals[0]:.3f} (per seed: median {statistics.median(ratios):.3f}, "
        f"min {min(ratios):.3f}, max {max(ratios):.3f}); goal: at most 0.700 (30% fewer)"
    )


if __name__ == "__main__":
    main()
