"""Run `datasets`' own tests with and without `cachetool.install_tracing()` and compare outcomes.

Tracing must not change a result: every test of `datasets`' fingerprinting, transforms, builder
and writer must pass, fail or skip the same way traced and plain. The test files come from a
checkout (or bare clone) of the `datasets` repository given on the command line, at the tag of
the installed `datasets` version when the repository has it (else `--rev`, else HEAD, said so);
nothing of `datasets` is kept here.

    python tests/datasets_suite/run_compare.py /path/to/datasets [--rev 5.0.1] [-k expr]

Prints one line per test whose outcome differs, one per test file that did not load (in either
pass: an import it needs is missing), and how many tests it compared. Exits 0 when every test
compared has the same outcome traced and plain, 1 when any differs, 2 when a test file did not
load or nothing was compared (no test ran in both passes): a comparison that tested nothing
never passes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.conftest import hf_env  # the checkout's own test helpers

FILES = (
    "tests/test_fingerprint.py",
    "tests/test_arrow_dataset.py",
    "tests/test_dataset_dict.py",
    "tests/test_builder.py",
    "tests/test_arrow_writer.py",
    "tests/test_fingerprint_tokenizer_stability.py",
)

TEST_TIMEOUT = 240  # seconds

PLUGIN = "import cachetool\n\ncachetool.install_tracing()\n"


def _git(repo: Path, *args: str) -> list[str]:
    inside = ["git", "-C", str(repo)] if (repo / ".git").exists() else ["git", f"--git-dir={repo}"]
    return [*inside, *args]


def _rev(repo: Path, wanted: str | None) -> tuple[str, str]:
    """(revision, a note on how it was chosen)."""
    if wanted:
        return wanted, "given"
    import importlib.metadata

    version = importlib.metadata.version("datasets")
    for tag in (version, f"v{version}"):
        command = _git(repo, "rev-parse", "-q", "--verify", f"refs/tags/{tag}")
        ok = subprocess.run(command, capture_output=True)
        if not ok.returncode:
            return tag, f"the tag of the installed datasets {version}"
    return "HEAD", f"no tag for the installed datasets {version} in the repository: its HEAD"


#: What the test files need besides themselves (fixtures are pytest plugins of conftest.py; the
#: image, audio and mesh files some fixtures name are read from tests/features/data).
SUPPORT = (
    "tests/__init__.py",
    "tests/conftest.py",
    "tests/utils.py",
    "tests/fixtures",
    "tests/features/data",
)

#: The outcome of a test file that did not load (an error while pytest collected it).
NOT_LOADED = "not loaded"


def _export(repo: Path, rev: str, dest: Path) -> list[str]:
    """Write the test files and what they need, file by file (a shallow or partial clone may
    lack some data blobs; a test that needs one fails the same way traced and plain). Returns
    the test files of `FILES` written."""
    listing = subprocess.run(
        _git(repo, "ls-tree", "-r", "--name-only", rev, "--", *SUPPORT, *FILES),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in listing:
        blob = subprocess.run(_git(repo, "show", f"{rev}:{name}"), capture_output=True)
        if blob.returncode:
            print(f"missing in the repository: {name}")
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    return [name for name in FILES if (dest / name).is_file()]


def _outcomes(junit: Path) -> dict[str, str]:
    """Test id -> outcome; a test file that did not load is `<file>` -> "not loaded (why)"."""
    out: dict[str, str] = {}
    if not junit.is_file():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        status = "passed"
        for child in case:
            if child.tag == "error" and child.get("message") == "collection failure":
                test_id = (case.get("name") or "").replace(".", "/") + ".py"
                why = [line for line in (child.text or "").splitlines() if line.startswith("E ")]
                status = f"{NOT_LOADED} ({why[-1][1:].strip() if why else 'collection failure'})"
                break
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "").splitlines()
                if status != "skipped" and message:
                    status += f" ({message[0]})"
                break
        out[test_id] = status
    return out


def _start(
    work: Path, files: list[str], traced: bool, extra: list[str]
) -> tuple[subprocess.Popen[str], Path, float]:
    name = "traced" if traced else "plain"
    base = work / name
    base.mkdir()
    env = hf_env(base, TMPDIR=str(base / "tmp"))
    (base / "tmp").mkdir()
    env["PYTHONPATH"] = os.pathsep.join([str(work), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    junit = base / "junit.xml"
    # --tb=native: pytest's own traceback formatting parses source and crashed on one failure.
    cmd = [sys.executable, "-m", "pytest", *files, "-v", "-p", "no:cacheprovider", "--tb=native"]
    # A file that does not load is reported (and fails the comparison); the others still run.
    cmd += [f"--junitxml={junit}", f"--basetemp={base / 'pytest'}", "--continue-on-collection-errors", *extra]
    if importlib.util.find_spec("pytest_timeout") is not None:
        # A few of those tests hang in a spawned multiprocess pool on a busy machine (traced or
        # not): a time limit per test fails them and the pass goes on.
        cmd += [f"--timeout={TEST_TIMEOUT}", "--timeout-method=signal"]
    if traced:
        cmd += ["-p", "cachetool_tracing_plugin"]
    log = open(base / "pytest.log", "w", encoding="utf-8")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    return proc, base, time.monotonic()


def _finish(proc: subprocess.Popen[str], base: Path, t0: float) -> dict[str, str]:
    code = proc.wait()
    seconds = time.monotonic() - t0
    lines = (base / "pytest.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
    print(f"{base.name}: {lines[-1] if lines else '(no output)'} [{seconds:.0f} s, exit {code}]")
    if code not in (0, 1):
        sys.stderr.write("\n".join(lines[-40:]) + "\n")
    outcomes = _outcomes(base / "junit.xml") or _outcomes_of_log(lines)
    # The passes run in folders of their own: a message naming a path names "plain" or "traced".
    return {test: status.replace(str(base), "<pass>")[:200] for test, status in outcomes.items()}


def _outcomes_of_log(lines: list[str]) -> dict[str, str]:
    """Outcomes from the verbose log, for a pass that ended before writing its report."""
    out: dict[str, str] = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and "::" in parts[0] and parts[1] in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
            out[parts[0]] = parts[1].lower()
    return out


def compare(plain: dict[str, str], traced: dict[str, str]) -> tuple[list[str], int]:
    """The report's lines and the exit code for the outcomes of both passes (see the module
    docstring)."""
    lines: list[str] = []
    both = set(plain) | set(traced)
    unloaded = sorted(t for t in both if NOT_LOADED in plain.get(t, "") + traced.get(t, ""))
    for name in unloaded:
        why = plain.get(name) if NOT_LOADED in plain.get(name, "") else traced.get(name)
        lines.append(f"NOT LOADED {name}: {why}")
    tests = sorted((set(plain) & set(traced)) - set(unloaded))
    differ = [t for t in tests if plain[t] != traced[t]]
    differ += sorted(t for t in (set(plain) ^ set(traced)) - set(unloaded))
    for test_id in differ:
        before, after = plain.get(test_id, "absent"), traced.get(test_id, "absent")
        lines.append(f"DIFFERS {test_id}: plain {before}, traced {after}")
    ran = [t for t in tests if not plain[t].startswith("skipped") or not traced[t].startswith("skipped")]
    counts: dict[str, int] = {}
    for t in tests:
        key = plain[t].split(" ", 1)[0]
        counts[key] = counts.get(key, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
    lines.append(
        f"{len(tests)} tests compared ({summary} without tracing); {len(differ)} differ with tracing on; "
        f"{len(unloaded)} test file(s) did not load"
    )
    if unloaded:
        lines.append("FAILED: a test file did not load (install `cachetool[datasets-suite]`)")
        return lines, 2
    if not ran:
        lines.append("FAILED: nothing was compared (no test ran in both passes)")
        return lines, 2
    return lines, 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a checkout or bare clone of huggingface/datasets")
    parser.add_argument("--rev", help="tag or commit of tests/ (default: the installed version's tag)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    import datasets

    rev, how = _rev(args.repo, args.rev)
    print(f"datasets {datasets.__version__} installed; tests/ of {rev} ({how})")
    with tempfile.TemporaryDirectory(prefix="cachetool-datasets-suite-") as tmp:
        work = Path(tmp)
        files = _export(args.repo, rev, work)
        (work / "cachetool_tracing_plugin.py").write_text(PLUGIN, encoding="utf-8")
        # Both at once: they share nothing but the machine.
        plain: dict[str, str] = {}
        traced: dict[str, str] = {}
        if files:
            runs = [_start(work, files, on, args.pytest_args) for on in (False, True)]
            plain, traced = _finish(*runs[0]), _finish(*runs[1])
    for name in FILES:
        if name not in files:
            print(f"not compared: {name} is not in the repository at {rev}")
    lines, code = compare(plain, traced)
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main())
