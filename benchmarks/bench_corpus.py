"""check-determinism over the pipelines of tests/corpus, in three modes, against a plain run.

For each pipeline and mode (default: one shared cache that starts empty; warm: the same after a
plain run filled the cache; isolated: --isolated), prints the verdict, the exit code, the culprit
(or unpicklable part, or source difference) and the time of the check against one plain
`python script.py` (timed on a warm cache, the same run the user would make). The expected
outcome per pipeline comes from its name: c*/m*/l* name a problem, k* are look-alike controls that
must stay deterministic. Nothing asserts: the table is the result.

    python benchmarks/bench_corpus.py                 # every pipeline, three modes
    python benchmarks/bench_corpus.py --only m0,k1    # names starting with these
    python benchmarks/bench_corpus.py --modes isolated --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests" / "corpus"
sys.path.insert(0, str(HERE.parent))

MODES = ("default", "warm", "isolated")


def env_for(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_", "PYTHONHASHSEED"))}
    (base / "tmp").mkdir(parents=True, exist_ok=True)
    env.update(
        HF_HOME=str(base / "hf_home"),
        HF_DATASETS_CACHE=str(base / "cache"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        TMPDIR=str(base / "tmp"),
        CACHETOOL_HOME=str(base / "cachetool_home"),
    )
    return env


def plain(script: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(script)], env=env, cwd=CORPUS, capture_output=True, timeout=300)
    return time.perf_counter() - start


def summary(report: Any) -> str:
    analysis = report.analysis
    if analysis is None:
        tail = (report.failed_run.stderr_tail.splitlines() or [""])[-1] if report.failed_run else ""
        return f"failed: {tail[:80]}"
    for cause in (*analysis.deterministic_causes, *analysis.random_causes):
        if cause.culprits:
            c = cause.culprits[0]
            return f"{cause.kind}/{c.kind}: {c.path_str}"
        if cause.unpicklable:
            return f"{cause.kind}: {cause.unpicklable[0].path_str}: {cause.unpicklable[0].error}"
        if cause.source_diffs:
            return f"{cause.kind}: {cause.source_diffs[0][0]}"
        return cause.kind
    return "-"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated name prefixes")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", dest="json_out", default=None)
    opts = parser.parse_args()
    from cachetool.determinism.check import check_determinism

    prefixes = [p for p in opts.only.split(",") if p]
    scripts = sorted(
        p
        for p in CORPUS.glob("[ciklm]*.py")
        if "helpers" not in p.name
        and p.name != "corpus_data.py"
        and (not prefixes or p.name.startswith(tuple(prefixes)))
    )
    modes = [m for m in opts.modes.split(",") if m]
    rows: list[dict[str, Any]] = []
    print(f"{'pipeline':42} {'mode':9} {'verdict':18} exit  x plain  culprit")
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        for script in scripts:
            control = script.name.startswith("k")
            for mode in modes:
                base = Path(tmp) / script.stem / mode
                env = env_for(base)
                if mode == "warm":
                    plain(script, env)
                start = time.perf_counter()
                report = check_determinism(
                    script, env=env, cwd=CORPUS, isolated=mode == "isolated", timeout=300
                )
                took = time.perf_counter() - start
                baseline = plain(script, env)
                code = int(report.exit_code)
                ok = (code == 0) if control else (code in (1, 3))
                row = {
                    "pipeline": script.name,
                    "mode": mode,
                    "control": control,
                    "verdict": report.verdict,
                    "exit_code": code,
                    "expected": ok,
                    "culprit": summary(report),
                    "seconds": round(took, 2),
                    "plain_seconds": round(baseline, 2),
                    "ratio": round(took / baseline, 1) if baseline else None,
                }
                rows.append(row)
                mark = "" if ok else "  <-- unexpected"
                print(
                    f"{script.name:42} {mode:9} {report.verdict:18} {code:4}  {row['ratio']:6}  "
                    f"{row['culprit']}{mark}",
                    flush=True,
                )
    bad = [r for r in rows if not r["expected"]]
    print(f"\n{len(rows)} checks, {len(bad)} unexpected ({sum(1 for r in bad if r['control'])} on controls)")
    if opts.json_out:
        Path(opts.json_out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
