"""Every performance goal of cachetool, measured in one command, as paired ratios with their noise.

Each row times a contender against a baseline measured in the same run, in pairs (baseline and
contender back to back, the order alternating from pair to pair), and prints the median of the
per-pair ratios, their spread (min–max: the noise of this machine right now) and the goal.
Whole processes are timed unless a row says otherwise. Nothing here asserts: a goal missed is a
line in the table, not a failure.

    python benchmarks/run_all.py                  # every row at the sizes of the goals
    python benchmarks/run_all.py --quick          # small sizes, a few pairs: a smoke run
    python benchmarks/run_all.py --only ls,startup --pairs 7
    python benchmarks/run_all.py --json results.json
    python benchmarks/run_all.py --only verify --big  # adds the 20 GB row: an idle machine

Rows (names for --only): ls (20k files: warm, cold, human output), ls100k (2k, 20k, 100k: time, peak
memory, read-index bytes per file, linearity), ls1m (1,000,000 files in 10,000 folders, warm, against
`find -printf`, and peak memory: not in the default set, the tree is made once under the user's cache
folder), startup (--help, --version, ls of an empty cache),
verify (--deep against cat), run (cachetool run against python on cache hits), determinism
(check-determinism against one plain run), ledger (a long-lived ledger, never compacted and after
`stats --compact`: ls, lineage, explain, stats and bytes), gc (`gc --temp` of 2,000 leftovers
beside 400 sleeping processes against none), remote (SeaweedFS on 127.0.0.1: `ls s3://` of 100,000
objects, shallow `verify s3://` in files/s, also through 20 ms round trips, `remote pull` of 256 MB
against a plain download), once (8 ranks on one cache: `run --once` against `run`, CPU and wall
after imports).
Compile the package first on machines that set PYTHONDONTWRITEBYTECODE (this script does it).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ls import derived, synthesize  # noqa: E402

PY = sys.executable
CT = [PY, "-m", "cachetool"]


@dataclass
class Row:
    what: str
    ratio: float | None  # median of the per-pair ratios (contender / baseline)
    low: float | None
    high: float | None
    goal: str
    met: bool | None
    detail: str = ""


@dataclass
class Sample:
    seconds: float
    max_rss_kb: int
    cpu: float = 0.0  # user + system seconds of the process and the children it waited for


def run(
    cmd: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None, stdout: int | None = None
) -> Sample:
    """Run a whole process; its wall time and its own peak memory (wait4, not the children's max)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), env=env, cwd=cwd, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Sample(seconds, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)


#: Starts a command from a small process and writes its peak memory (KB) to argv[1]: a process
#: started from this script directly (vfork) counts this script's own resident memory as its peak.
_PEAK_LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_peak(cmd: Sequence[str], env: dict[str, str] | None = None) -> Sample:
    """`run`, with the peak memory of the command alone (started from a small launcher)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as out:
        s = run([sys.executable, "-S", "-c", _PEAK_LAUNCHER, out.name, *cmd], env)
        return Sample(s.seconds, int(out.read() or 0), s.cpu)


def paired(
    baseline: Callable[[], float], contender: Callable[[], float], pairs: int, warmup: bool = True
) -> tuple[float, float, float, list[float], list[float]]:
    """Median, min and max of contender/baseline over `pairs` back-to-back pairs (ABBA order)."""
    if warmup:
        baseline()
        contender()
    ratios, base_t, cont_t = [], [], []
    for i in range(pairs):
        if i % 2 == 0:
            b = baseline()
            c = contender()
        else:
            c = contender()
            b = baseline()
        base_t.append(b)
        cont_t.append(c)
        ratios.append(c / b)
    return statistics.median(ratios), min(ratios), max(ratios), base_t, cont_t


def row(
    what: str,
    result: tuple[float, float, float, list[float], list[float]],
    goal: float,
    higher_is_better: bool = False,
    detail: str = "",
) -> Row:
    med, lo, hi, b, c = result
    met = med >= goal if higher_is_better else med <= goal
    sign = "≥" if higher_is_better else "≤"
    detail = detail or f"baseline {statistics.median(b):.3f}s, contender {statistics.median(c):.3f}s"
    return Row(what, med, lo, hi, f"{sign} {goal:g}×", met, detail)


def env_for(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_"))}
    env.update(
        HF_DATASETS_CACHE=str(base / "cache"),
        HF_HOME=str(base / "hf_home"),
        HF_HUB_OFFLINE="1",
        HF_UPDATE_DOWNLOAD_COUNTS="0",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        CACHETOOL_HOME=str(base / "cachetool_home"),
    )
    return env


WALK = "import sys; sys.path.insert(0, {here!r}); from bench_ls import floor_walk; floor_walk({root!r})"


# --- ls ---------------------------------------------------------------------------------------


def bench_ls(base: Path, files: int, pairs: int) -> list[Row]:
    root = base / f"ls{files}"
    synthesize(root, files)
    env = env_for(base)
    walk = [PY, "-c", WALK.format(here=str(HERE), root=str(root))]
    ls_json = [*CT, "ls", str(root), "--json"]
    cpu: dict[str, list[float]] = {"walk": [], "warm": [], "cold": []}

    def timed(key: str, cmd: Sequence[str], env: dict[str, str]) -> float:
        s = run(cmd, env)
        cpu.setdefault(key, []).append(s.cpu)
        return s.seconds

    def walk_t() -> float:
        return timed("walk", walk, env)

    def warm_t() -> float:
        return timed("warm", ls_json, env)

    def cold_t() -> float:
        shutil.rmtree(derived(root, env), ignore_errors=True)
        return timed("cold", ls_json, env)

    def json_t() -> float:
        return run(ls_json, env).seconds

    def human_t() -> float:
        return run([*CT, "ls", str(root)], {**env, "COLUMNS": "120"}).seconds  # stdout is a pipe

    def with_cpu(result: tuple[float, float, float, list[float], list[float]], key: str) -> str:
        """The wall times, and the CPU times (which the machine's other work disturbs less)."""
        _, _, _, b, c = result
        walk_cpu, ls_cpu = statistics.median(cpu["walk"]), statistics.median(cpu[key])
        return (
            f"baseline {statistics.median(b):.3f}s, contender {statistics.median(c):.3f}s; "
            f"CPU {walk_cpu:.2f}s / {ls_cpu:.2f}s = {ls_cpu / walk_cpu:.1f}×"
        )

    run(ls_json, env)  # the index exists for the warm rows
    warm = paired(walk_t, warm_t, pairs)
    cold = paired(walk_t, cold_t, pairs)
    k = files // 1000
    rows = [
        row(f"ls --json, {k}k files, warm / walk process", warm, 2, detail=with_cpu(warm, "warm")),
        row(f"ls --json, {k}k files, cold / walk process", cold, 5, detail=with_cpu(cold, "cold")),
    ]
    run(ls_json, env)
    rows.append(
        row(
            f"ls human piped / ls --json, {files // 1000}k files, warm",
            paired(json_t, human_t, pairs),
            1.2,
        )
    )
    return rows


def _k(n: int) -> str:
    """A file count as the rows say it: 2k, 100k, or 200."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def bench_ls_large(base: Path, files: int, small: int, pairs: int) -> list[Row]:
    """Time and peak memory at `small` / 10, `small` and `files` files, and how time grows from
    `small` files (linear: ratio ≈ files/small)."""
    env = env_for(base)
    out: list[Row] = []
    stats: dict[int, dict[str, float]] = {}
    tiny = small // 10
    for n in (tiny, small, files):
        root = base / f"large{n}"
        synthesize(root, n)
        ls_json = [*CT, "ls", str(root), "--json"]
        cold, warm, cold_rss, warm_rss = [], [], [], []
        for _ in range(max(1, pairs // 2)):
            shutil.rmtree(derived(root, env), ignore_errors=True)
            s = run_peak(ls_json, env)
            cold.append(s.seconds)
            cold_rss.append(s.max_rss_kb)
            s = run_peak(ls_json, env)
            warm.append(s.seconds)
            warm_rss.append(s.max_rss_kb)
        index_bytes = sum(p.stat().st_size for p in derived(root, env).glob("read-index*") if p.is_file())
        stats[n] = {
            "cold": statistics.median(cold),
            "warm": statistics.median(warm),
            "rss_mb": max(cold_rss + warm_rss) / 1024,
            "cold_rss_mb": max(cold_rss) / 1024,
            "warm_rss_mb": max(warm_rss) / 1024,
            "index_per_file": index_bytes / n,
        }
    big, little = stats[files], stats[small]
    scale = files / small
    out.append(
        Row(
            f"ls --json at {_k(tiny)}, {_k(small)}, {_k(files)} files: peak memory (MB)",
            max(st["rss_mb"] for st in stats.values()),
            None,
            None,
            "≤ 150",
            all(st["rss_mb"] <= 150 for st in stats.values()),
            "; ".join(
                f"{_k(n)}: cold {st['cold']:.2f}s {st['cold_rss_mb']:.0f} MB, "
                f"warm {st['warm']:.2f}s {st['warm_rss_mb']:.0f} MB"
                for n, st in stats.items()
            ),
        )
    )
    for key in ("cold", "warm"):
        growth = big[key] / little[key]
        out.append(
            Row(
                f"ls --json {key}: time at {files // 1000}k / time at {small // 1000}k files",
                growth,
                None,
                None,
                f"≤ {scale:g}× (linear)",
                growth <= scale * 1.1,
                f"{little[key]:.2f}s → {big[key]:.2f}s",
            )
        )
    out.append(
        Row(
            f"ls peak memory at {files // 1000}k files (MB)",
            big["rss_mb"],
            None,
            None,
            "≤ 150",
            big["rss_mb"] <= 150,
            f"cold {big['cold_rss_mb']:.0f} MB, warm {big['warm_rss_mb']:.0f} MB",
        )
    )
    out.append(
        Row(
            f"read index bytes per file at {files // 1000}k files",
            big["index_per_file"],
            None,
            None,
            "≤ 60",
            big["index_per_file"] <= 60,
        )
    )
    return out


def bench_ls_1m(pairs: int, files: int = 1_000_000, folders: int = 10_000) -> list[Row]:
    """Warm `ls --json` of `files` files in `folders` dataset folders against `find` printing
    each file's size and times, and its peak memory. The tree is made once, under the user's
    cache folder (some 4 GB, a few minutes), and kept for the next run."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cachetool-bench"
    root = home / f"ls{_k(files)}"
    done = home / f"ls{_k(files)}.done"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        synthesize(root, files, folders)
        done.touch()
    env = env_for(home)
    ls_json = [*CT, "ls", str(root), "--json"]
    find = ["find", str(root), "-printf", "%s %T@ %A@\n"]
    peaks: list[float] = []

    def warm_t() -> float:
        s = run_peak(ls_json, env)
        peaks.append(s.max_rss_kb / 1024)
        return s.seconds

    run(ls_json, env)  # the read index exists for the warm rows
    warm = paired(lambda: run(find, env).seconds, warm_t, pairs)
    return [
        row(f"ls --json, {_k(files)} files, warm / find -printf", warm, 2.5),
        Row(
            f"ls --json peak memory at {_k(files)} files (MB)",
            max(peaks),
            None,
            None,
            "≤ 1024",
            max(peaks) <= 1024,
        ),
    ]


# --- start-up --------------------------------------------------------------------------------


def bench_startup(base: Path, pairs: int) -> list[Row]:
    env = env_for(base)
    empty = base / "empty_cache"  # what every command pays before it reads anything
    empty.mkdir(exist_ok=True)

    def typer_t() -> float:
        return run([PY, "-c", "import typer"], env).seconds

    return [
        row(
            "cachetool --help / import typer",
            paired(typer_t, lambda: run([*CT, "--help"], env).seconds, pairs),
            1.5,
        ),
        row(
            "cachetool --version / import typer",
            paired(typer_t, lambda: run([*CT, "--version"], env).seconds, pairs),
            1.5,
        ),
        row(
            "cachetool ls --json, empty cache / import typer",
            paired(typer_t, lambda: run([*CT, "ls", str(empty), "--json"], env).seconds, pairs),
            1.5,
        ),
    ]


# --- verify --deep ----------------------------------------------------------------------------

BUILD_VERIFY = """
import sys
from datasets import Dataset, concatenate_datasets, load_from_disk
rows = int(sys.argv[1]); n = 200_000
def gen(start):
    stop = min(start + n, rows)
    return {"id": list(range(start, stop)), "score": [i * 0.5 for i in range(start, stop)],
            "label": ["label-%d" % (i % 17) for i in range(start, stop)],
            "text": [("row %d " % i) * (20 + i % 40) for i in range(start, stop)]}
ds = concatenate_datasets([Dataset.from_dict(gen(s)) for s in range(0, rows, n)])
ds.save_to_disk(sys.argv[2] + "/saved", num_shards=max(1, rows // 500_000))
ds = load_from_disk(sys.argv[2] + "/saved")
ds.map(lambda b: {"n": [len(t) for t in b["text"]]}, batched=True, batch_size=10_000)
"""


def bench_verify(base: Path, sizes_gb: Sequence[float], pairs: int) -> list[Row]:
    """Per size: `verify --deep` against `cat`, then the same after `verify --deep --record`."""
    from bench_verify import build, resident, start_cost

    out = []
    for gb in sizes_gb:
        folder = base / f"verify{gb:g}"
        env = env_for(folder)
        root = folder / "cache"
        build(gb, root, env, BUILD_VERIFY)
        files = sorted(str(p) for p in root.rglob("*.arrow"))
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
        start = start_cost(folder / "empty", env)
        deep = [*CT, "verify", "--deep", "--cache-dir", str(root)]
        out.append(_verify_row(files, deep, env, pairs, gb, start, resident, ""))
        subprocess.run([*deep, "--record"], stdout=subprocess.DEVNULL, check=True, env=env)
        out.append(_verify_row(files, deep, env, pairs, gb, start, resident, ", checksums recorded"))
        shutil.rmtree(folder, ignore_errors=True)
    return out


def _verify_row(
    files: list[str],
    deep: list[str],
    env: dict[str, str],
    pairs: int,
    gb: float,
    start: tuple[float, float],
    resident: Callable[[list[str]], float | None],
    what: str,
) -> Row:
    from bench_verify import cpu_summary, timed

    total = sum(os.path.getsize(f) for f in files)
    cpu: dict[str, list[float]] = {"cat": [], "deep": []}

    def cat_t() -> float:
        wall, used = timed(["cat", *files], env)
        cpu["cat"].append(used)
        return wall

    def deep_t() -> float:
        wall, used = timed(deep, env)
        cpu["deep"].append(used)
        return wall

    held = [resident(files)]
    med, lo, hi, b, c = paired(cat_t, deep_t, pairs)
    held.append(resident(files))
    goal = 0.9 if gb >= 20 else 0.7
    # CPU of the measured pairs (the first run of each warmed up).
    cpu_pairs = [(0.0, cc, 0.0, dc, 0.0) for cc, dc in zip(cpu["cat"][1:], cpu["deep"][1:], strict=True)]
    cached = "/".join("?" if h is None else f"{h:.0%}" for h in held)
    # Throughput ratio: cat time / verify time (higher is better).
    return Row(
        f"verify --deep throughput / cat, {total / 1e9:.1f} GB, page cache warm{what}",
        1 / med,
        1 / hi,
        1 / lo,
        f"≥ {goal:g}×",
        1 / med >= goal,
        f"in the page cache before/after the pairs {cached}; "
        f"cat {total / 1e9 / statistics.median(b):.2f} GB/s, "
        f"verify {total / 1e9 / statistics.median(c):.2f} GB/s; "
        + cpu_summary(cpu_pairs, total / 1e9, start, os.cpu_count() or 1),
    )


# --- cachetool run ----------------------------------------------------------------------------

HITS = """
import os, sys
from datasets import load_dataset
here = os.path.dirname(os.path.abspath(__file__))
ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
def add(ex, k):
    return {"v": ex["x"] + k}
for k in range(int(sys.argv[1])):
    ds = ds.map(add, fn_kwargs={"k": k})
"""


def bench_run(base: Path, steps: int, pairs: int) -> list[Row]:
    work = base / "run"
    work.mkdir()
    (work / "data.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(200)))
    (work / "pipeline.py").write_text(HITS)
    env = env_for(work)
    subprocess.run([PY, "pipeline.py", str(steps)], cwd=work, env=env, check=True, capture_output=True)
    # CPU time of the processes: on a shared machine, other processes move wall-clock ratios by
    # more than the whole difference (docs/performance.md); the wall-clock medians are shown too.
    walls: dict[str, list[float]] = {"python": [], "run": []}

    def timed(key: str, cmd: list[str]) -> float:
        s = run(cmd, env, work)
        walls[key].append(s.seconds)
        return s.cpu

    result = paired(
        lambda: timed("python", [PY, "pipeline.py", str(steps)]),
        lambda: timed("run", [*CT, "run", "pipeline.py", str(steps)]),
        pairs,
    )
    b, c = statistics.median(result[3]), statistics.median(result[4])
    wall = statistics.median(walls["run"]) / statistics.median(walls["python"])
    modules, kb = traced_imports(env, work, steps)
    detail = (
        f"CPU: python {b:.3f}s, cachetool run {c:.3f}s; wall-clock medians {wall:.2f}×; "
        f"imports {modules} cachetool modules ({kb:.0f} kB of bytecode: the start-up part, whatever the load)"
    )
    return [row(f"cachetool run / python (CPU), {steps} cache-hit transforms", result, 1.05, detail=detail)]


def traced_imports(env: dict[str, str], work: Path, steps: int) -> tuple[int, float]:
    """The cachetool modules `cachetool run` of the pipeline imports, and their compiled size."""
    import importlib.util

    p = subprocess.run(
        [PY, "-X", "importtime", *CT[1:], "run", "pipeline.py", str(steps)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    names = [
        line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")
    ]
    names = [n for n in names if n == "cachetool" or n.startswith("cachetool.")]
    size = 0
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with contextlib.suppress(OSError):
                size += os.path.getsize(importlib.util.cache_from_source(spec.origin))
    return len(names), size / 1e3


# --- check-determinism ------------------------------------------------------------------------

CPU_PIPELINE = textwrap.dedent(
    """\
    import os
    from datasets import load_dataset
    here = os.path.dirname(os.path.abspath(__file__))
    def score(ex):
        words = ex["text"].split()
        return {"score": sum(len(w) * (i % 7) for i, w in enumerate(words)), "n": len(words)}
    ds = load_dataset("json", data_files=os.path.join(here, "rows.jsonl"), split="train")
    ds = ds.map(score).filter(lambda ex: ex["n"] > 3).map(lambda ex: {"half": ex["score"] // 2})
    """
)


def bench_determinism(base: Path, rows: int, pairs: int) -> list[Row]:
    """check-determinism against one plain run: a script of 1-2 s (fixed costs show: goal 1.5x)
    and one of `rows` rows (a pipeline of a minute on a full run: goal 1.1x)."""
    out = []
    for n, goal in ((15_000, 1.5), (rows, 1.1)):
        work = base / f"determinism-{n}"
        work.mkdir()
        with open(work / "rows.jsonl", "w") as f:
            for i in range(n):
                text = " ".join(f"w{(i * j) % 997}" for j in range(40))
                f.write(json.dumps({"id": i, "text": text}) + "\n")
        (work / "pipeline.py").write_text(CPU_PIPELINE)

        def fresh(tag: str, n: int = n) -> dict[str, str]:
            folder = base / f"det-{n}-{tag}"
            shutil.rmtree(folder, ignore_errors=True)
            return env_for(folder)

        out.append(
            row(
                f"check-determinism (default) / one plain run, {n // 1000}k rows, wall",
                paired(
                    lambda work=work, fresh=fresh: run([PY, "pipeline.py"], fresh("plain"), work).seconds,
                    lambda work=work, fresh=fresh: (
                        run([*CT, "check-determinism", "pipeline.py"], fresh("check"), work).seconds
                    ),
                    pairs,
                    warmup=False,
                ),
                goal,
            )
        )
    return out


# --- a long-lived ledger ----------------------------------------------------------------------


def synthesize_ledger(root: Path, runs: int, steps: int) -> str:
    """`runs` segments of `steps` transform records each, shaped as the tracer writes them; returns
    a fingerprint in the middle of the last run."""
    folder = root / ".cachetool" / "ledger"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - runs * 600
    middle = ""
    for r in range(runs):
        run_id = f"host-{1000 + r}-{int(t0 + r * 600)}"
        lines = []
        parent = f"{r:08x}00000000"
        for s in range(steps):
            fp = f"{r:08x}{s + 1:08x}"
            lines.append(
                json.dumps(
                    {
                        "v": 1,
                        "type": "transform",
                        "seq": s,
                        "run": run_id,
                        "time": t0 + r * 600 + s,
                        "duration": 0.01,
                        "host": "host",
                        "pid": 1000 + r,
                        "versions": {"python": "3.11", "datasets": "5.2.0"},
                        "operation": "map",
                        "transform": "datasets.arrow_dataset.Dataset._map_single",
                        "result": fp,
                        "parents": [parent],
                        "output": None,
                        "internal": False,
                        "call_site": {"file": "/work/pipeline.py", "line": 10 + s, "function": "<module>"},
                        "function": {
                            "qualname": f"step{s}",
                            "file": "/work/pipeline.py",
                            "line": 5,
                            "source_hash": "sha256:0123456789abcdef",
                            "code_hash": "x",
                            "by_reference": False,
                            "deps": [],
                        },
                        "args": {
                            "function": {"digest": f"{s:016x}", "repr": None, "type": "function"},
                            "batched": {"digest": "aa", "repr": "False", "type": "bool"},
                        },
                        "random_fallback": None,
                        "fingerprint_given": False,
                        "files": [{"path": f"/gone/cache-{fp}.arrow", "size": 1000, "status": "written"}],
                        "cache": "miss",
                        "in_memory": False,
                        "root": str(root),
                        "split": "train",
                        "error": None,
                    }
                )
            )
            parent = fp
            if r == runs - 1 and s == steps // 2:
                middle = fp
        marker = {"v": 1, "seq": steps, "run": run_id, "host": "host", "pid": 1000 + r, "internal": False}
        end = {**marker, "type": "run-end", "time": t0 + r * 600 + steps, "duration": 0.0}
        lines.append(json.dumps(end))  # the run ended: a compaction may fold it
        (folder / f"{run_id}.jsonl").write_text("\n".join(lines) + "\n")
    return middle


def bench_ledger(base: Path, runs: int, steps: int, pairs: int) -> list[Row]:
    """A long-lived ledger, never compacted and after `stats --compact` (what `gc` does past 64 MB):
    `ls` against the same cache without a ledger, `lineage` and `explain` of one fingerprint,
    the bytes and `stats` after / before."""
    plain = base / "ledger-none"
    synthesize(plain, 2000, folders=20)
    full = base / "ledger-full"
    shutil.copytree(plain, full)
    fp = synthesize_ledger(full, runs, steps)
    compacted = base / "ledger-compacted"
    shutil.copytree(full, compacted)
    env = env_for(base)
    doc = subprocess.run(
        [*CT, "stats", "--compact", "--json", "--cache-dir", str(compacted)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    c = json.loads(doc.stdout)["compaction"]
    for r in (plain, full, compacted):
        run([*CT, "ls", str(r), "--json"], env)  # read indexes in place for each
    k = f"{runs * steps // 1000}k records"
    ratio = c["bytes_after"] / c["bytes_before"]
    rows = [
        Row(
            f"ledger bytes after stats --compact / before, {k}",
            ratio,
            ratio,
            ratio,
            "≤ 0.1×",
            ratio <= 0.1,
            f"{c['bytes_before'] / 1e6:.1f} MB -> {c['bytes_after'] / 1e6:.1f} MB, {c['runs']} runs",
        ),
        row(
            f"stats after --compact / before, {k}",
            paired(
                lambda: run([*CT, "stats", "--json", "--cache-dir", str(full)], env).seconds,
                lambda: run([*CT, "stats", "--json", "--cache-dir", str(compacted)], env).seconds,
                max(1, pairs // 2),
            ),
            0.1,
        ),
    ]
    for state, root in (("never compacted", full), ("compacted", compacted)):
        rows.append(
            row(
                f"ls with a ledger of {k}, {state} / without",
                paired(
                    lambda: run([*CT, "ls", str(plain), "--json"], env).seconds,
                    lambda r=root: run([*CT, "ls", str(r), "--json"], env).seconds,
                    pairs,
                ),
                1.2,
            )
        )
        for name in ("lineage", "explain"):
            cmd = [*CT, name, fp, "--cache-dir", str(root), "--json"]
            samples = [run(cmd, env).seconds for _ in range(max(1, pairs // 2))]
            t = statistics.median(samples)
            what = f"{name} of one fingerprint, {k}, {state} (s)"
            rows.append(Row(what, t, min(samples), max(samples), "≤ 0.3 s", t <= 0.3))
    return rows


# --- gc beside many processes -----------------------------------------------------------------

#: Starts argv[1] processes that each hold the argv[3] files of folder argv[2] open (the first one
#: memory-mapped too) and sleep; prints "ready" once every one holds them, and ends them all when
#: its stdin closes.
_SLEEPERS = """import mmap, os, signal, sys
n, folder, files = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
paths = [os.path.join(folder, f"held{i}") for i in range(files)]
for p in paths:
    with open(p, "wb") as f:
        f.write(b"x" * 4096)
r, w = os.pipe()
kids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        fds = [os.open(p, os.O_RDONLY) for p in paths]
        m = mmap.mmap(fds[0], 0, prot=mmap.PROT_READ)
        os.write(w, b".")
        signal.pause()
        os._exit(0)
    kids.append(pid)
os.close(w)
got = 0
while got < n:
    chunk = os.read(r, n - got)
    if not chunk:
        break
    got += len(chunk)
print("ready", flush=True)
sys.stdin.read()
for pid in kids:
    os.kill(pid, signal.SIGKILL)
for pid in kids:
    os.waitpid(pid, 0)
"""


def bench_gc(base: Path, leftovers: int, procs: int, pairs: int) -> list[Row]:
    """`gc --temp --min-age 0 -y` removing `leftovers` tmp files of killed writers, with `procs`
    more sleeping processes on the host (each holding 10 files open, one mapped) against none."""
    template = base / "gc-template"
    synthesize(template, 20, folders=20)
    folders = sorted(p.parent for p in template.rglob("dataset_info.json"))
    head = next(folders[0].glob("*.arrow")).read_bytes()[:600]  # a killed writer's partial stream
    for i in range(leftovers):
        (folders[i % len(folders)] / f"tmp{i:08x}").write_bytes(head)
    tmp_dir = base / "gc-tmp"
    tmp_dir.mkdir()
    held = base / "gc-held"
    held.mkdir()
    env = {**env_for(base), "TMPDIR": str(tmp_dir)}
    root = base / "gc-cache"
    gc = [*CT, "gc", "--cache-dir", str(root), "--temp", "--min-age", "0", "-y"]

    def alone_t() -> float:
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root, symlinks=True)
        s = run(gc, env)
        left = sum(1 for _ in root.rglob("tmp*"))
        if left:
            raise RuntimeError(f"gc left {left} of {leftovers} tmp files: nothing comparable was timed")
        return s.seconds

    def crowded_t() -> float:
        sleepers = subprocess.Popen(
            [PY, "-c", _SLEEPERS, str(procs), str(held), "10"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert sleepers.stdin is not None and sleepers.stdout is not None
        try:
            if sleepers.stdout.readline().strip() != "ready":
                raise RuntimeError("the sleeping processes did not start")
            return alone_t()
        finally:
            sleepers.stdin.close()
            sleepers.wait()

    return [
        row(
            f"gc --temp, {_k(leftovers)} leftovers, {procs} more processes / none",
            paired(alone_t, crowded_t, pairs),
            2,
        )
    ]


# --- remote -----------------------------------------------------------------------------------


def bench_remote(base: Path, results: int, pull_mb: int, pairs: int) -> list[Row]:
    """The remote tier against SeaweedFS on 127.0.0.1 (`bench_remote.measure`): `ls` and shallow
    `verify` of `results` results (two objects each), a pull of `pull_mb` MB against a plain
    download of the same objects."""
    from bench_remote import measure

    try:
        got = measure(base / "remote", results, pull_mb, pairs)
    except RuntimeError as e:  # SeaweedFS missing or not starting: said, not failed
        return [Row("remote tier", None, None, None, "", None, str(e).splitlines()[0])]
    return [Row(**r) for r in got]


def bench_once(base: Path, ranks: int, rows: int, pairs: int) -> list[Row]:
    """8 ranks on one cache under `run --once` against `run` (`bench_once.measure`)."""
    from bench_once import measure

    return [Row(**r) for r in measure(base / "once", ranks, rows, pairs)]


# --- main -------------------------------------------------------------------------------------

ALL = ("ls", "ls100k", "startup", "verify", "run", "determinism", "ledger", "gc", "remote", "once")
#: Rows that take minutes, run only when named (`--only ls1m`).
EXTRA = ("ls1m",)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 3 pairs: a smoke run")
    parser.add_argument("--only", default=",".join(ALL), help=f"comma-separated rows: {', '.join(ALL)}")
    parser.add_argument("--pairs", type=int, default=None, help="pairs per row (default 5; --quick 3)")
    parser.add_argument("--verify-gb", default=None, help="comma-separated sizes (default 6; --quick 0.5)")
    parser.add_argument(
        "--big",
        action="store_true",
        help="also the 20 GB verify row (needs ~20 GB of disk and of page cache: an idle machine)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    ns = parser.parse_args()
    only = [x.strip() for x in ns.only.split(",") if x.strip()]
    unknown = set(only) - set(ALL) - set(EXTRA)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    pairs = ns.pairs or (3 if ns.quick else 5)
    quick = ns.quick
    compileall.compile_dir(str(HERE.parent / "cachetool"), quiet=1)

    base = Path(tempfile.mkdtemp(prefix="ct-bench-"))
    rows: list[Row] = []
    loads = [os.getloadavg()[0]]  # other work on the machine: every ratio carries it
    try:
        for name in only:
            t0 = time.perf_counter()
            print(f"[{name}] …", file=sys.stderr, flush=True)
            if name == "ls":
                rows += bench_ls(base, 2000 if quick else 20_000, pairs)
            elif name == "ls100k":
                rows += bench_ls_large(base, 10_000 if quick else 100_000, 2000 if quick else 20_000, pairs)
            elif name == "ls1m":
                rows += bench_ls_1m(pairs, *((20_000, 200) if quick else ()))
            elif name == "startup":
                rows += bench_startup(base, pairs * 2)
            elif name == "verify":
                sizes = ns.verify_gb or ("0.5" if quick else "6")
                sizes += ",20" if ns.big else ""
                rows += bench_verify(base, [float(x) for x in sizes.split(",")], pairs)
            elif name == "run":
                rows += bench_run(base, 60, pairs)
            elif name == "determinism":
                rows += bench_determinism(base, 10_000 if quick else 80_000, pairs)
            elif name == "ledger":
                rows += bench_ledger(base, 50 if quick else 1000, 100, pairs)
            elif name == "gc":
                rows += bench_gc(base, 500 if quick else 2000, 100 if quick else 400, pairs)
            elif name == "remote":
                rows += bench_remote(base, 2000 if quick else 50_000, 32 if quick else 256, pairs)
            elif name == "once":
                rows += bench_once(base, 8, 20_000 if quick else 100_000, min(pairs, 3))
            loads.append(os.getloadavg()[0])
            print(f"[{name}] {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
        report(rows, ns.json, loads)  # before the clean-up: removing 100,000 files can take minutes
    finally:
        shutil.rmtree(base, ignore_errors=True)


def report(rows: list[Row], json_path: Path | None, loads: Sequence[float] = ()) -> None:
    print(f"\nMachine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    if loads:
        print(f"Load average (1 min) during the run: {min(loads):.1f}–{max(loads):.1f}")
    print(f"{'what':64} {'value':>8} {'noise':>13} {'goal':>16}  met", flush=True)
    for r in rows:
        value = "" if r.ratio is None else f"{r.ratio:8.2f}"
        noise = "" if r.low is None or r.high is None else f"{r.low:.2f}–{r.high:.2f}"
        met = {True: "yes", False: "NO", None: ""}[r.met]
        print(f"{r.what:64} {value:>8} {noise:>13} {r.goal:>16}  {met}")
        if r.detail:
            print(f"    {r.detail}")
    sys.stdout.flush()
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
