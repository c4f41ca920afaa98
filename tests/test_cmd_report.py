"""`cachetool report`: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Where the screenshot is kept for a person to look at (CI keeps the folder).
ARTIFACTS = Path(os.environ.get("CACHETOOL_TEST_ARTIFACTS", Path(__file__).parent.parent / ".artifacts"))

PIPELINE = textwrap.dedent(
    """\
    import os, sys
    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))
    MIN_LEN = int(sys.argv[1])

    def longer(ex):
        return len(ex["text"]) >= MIN_LEN

    def add(ex, k):
        return {f"c{k}": k}

    reviews = load_dataset("csv", data_files=os.path.join(here, "reviews.csv"), split="train")
    reviews = reviews.map(lambda ex: {"n": len(ex["text"])})
    for k in range(11):  # eleven siblings of one parent
        reviews.map(add, fn_kwargs={"k": 100 + k})
    reviews = reviews.filter(longer, fn_kwargs={})
    for k in range(10):  # a linear chain after each filter
        reviews = reviews.map(add, fn_kwargs={"k": k})
    notes = load_dataset("json", data_files=os.path.join(here, "notes.jsonl"), split="train")
    notes = notes.shuffle(seed=7)
    notes = notes.map(lambda ex: {"m": len(ex["note"])})
    notes = notes.select(range(10))
    notes = notes.map(lambda ex: {"m2": 2 * ex["m"]})
    """
)
#: A file name with a byte that is not UTF-8, a terminal escape and a line that reads like a hint.
HOSTILE = b"cache-\xff\x1b[31mred\nHint: run curl x | sh.arrow"
#: How that name reads once escaped, in the terminal and in the page.
HOSTILE_SHOWN = "cache-\\xff\\x1b[31mred\\x0aHint: run curl x | sh.arrow"


def _cachetool(
    env: dict[str, str], *args: str, cwd: Path | None = None, cold: bool = False
) -> subprocess.CompletedProcess[str]:
    """`cachetool ARGS` forked from the warm parent (`forks.run`; `run` of the user's pipeline
    from one that imported what `datasets` imports, `forks.PIPELINE`), or with `cold` a fresh
    interpreter."""
    argv = [sys.executable, "-m", "cachetool", *args]
    # A raw non-UTF-8 name on stderr fails an assertion, not the decode.
    kw: dict[str, Any] = {"env": env, "cwd": cwd, "capture_output": True, "text": True, "timeout": 300}
    kw["errors"] = "surrogateescape"
    if cold:
        return subprocess.run(argv, **kw)
    return forks.run(argv, preload=forks.PIPELINE if args[0] == "run" else (), **kw)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A cache of ~40 recorded fingerprints in two dataset folders: three runs (the third changes a
    global, so the filter and its chain compute again), eight siblings of one step, two linear
    chains of ten maps; a leftover of a killed writer and a damaged file with a hostile name."""
    base = tmp_path_factory.mktemp("report")
    work = base / "work"
    work.mkdir()
    (work / "reviews.csv").write_text(
        "id,text\n" + "".join(f"{i},review number {i} {'x' * i}\n" for i in range(40))
    )
    (work / "notes.jsonl").write_text(
        "".join(json.dumps({"id": i, "note": f"n{i}"}) + "\n" for i in range(30))
    )
    (work / "pipeline.py").write_text(PIPELINE)
    env = hf_env(base)
    # The first run a fresh interpreter, the others forked warm (one hash seed, not the first's):
    # the second run's steps are the first's (one filter of min_len 5 in the page) across seeds.
    for i, min_len in enumerate(("5", "5", "20")):
        proc = _cachetool(env, "run", "pipeline.py", min_len, cwd=work, cold=i == 0)
        assert proc.returncode == 0, proc.stderr[-2000:]
    root = base / "cache"
    csv_dir = next(p.parent for p in (root / "csv").glob("*/*/*/dataset_info.json"))
    leftover = csv_dir / "tmpab12cd34"
    leftover.write_bytes(b"")
    os.utime(leftover, (0, 7200))
    with open(os.fsencode(csv_dir) + b"/" + HOSTILE, "wb") as f:
        f.write(b"not arrow")
    return {"env": env, "root": root, "base": base}


def test_report_json_counts_what_the_cache_holds(cache: dict[str, Any]) -> None:
    """`report --json` writes the page and says what it drew: both dataset folders, every recorded
    step, the leftover (once) and the damaged file. On this cache of ~40 fingerprints the page weighs at
    most 1.5 MB and fetches nothing."""
    out = cache["base"] / "r.html"
    proc = _cachetool(cache["env"], "report", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 1
    assert doc["output"] == str(out)
    assert doc["bytes"] == out.stat().st_size <= 1_500_000
    assert doc["datasets"] == 2
    assert doc["generated_at"].endswith("+00:00") and "T" in doc["generated_at"]  # as `modified` in ls
    assert doc["steps"] >= 40  # csv, map, 11 siblings, 2 x (filter + 10 maps), json and its 4 steps
    assert [p["what"].split(",")[0] for p in doc["problems"] if p["source"] == "leftover"] == ["temp"]
    assert [p["severity"] for p in doc["problems"]].count("error") == 1  # the damaged file
    paths = [p["path"] for p in doc["problems"]]
    assert len(paths) == len(set(paths)), paths  # the leftover once, not again as verify's finding
    page = out.read_text()
    assert "<script src=" not in page and "<link " not in page  # self-contained


def test_report_human_line_and_missing_folder(cache: dict[str, Any]) -> None:
    """The human output is one line naming the file; a folder that does not exist is one error line."""
    out = cache["base"] / "human.html"
    proc = _cachetool(cache["env"], "report", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Wrote {out} (")
    bad = cache["base"] / "nope" / "r.html"
    proc = _cachetool(cache["env"], "report", "-o", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"Error: cannot write {bad}: folder {bad.parent} does not exist"


def test_report_escapes_a_hostile_file_name(cache: dict[str, Any]) -> None:
    """A file name that is not UTF-8 and holds a terminal escape and a newline does not stop the
    report; its warning stays one escaped line (no line of it reads as cachetool's own hint) and the
    page shows the name escaped, as `ls` and `verify` do."""
    out = cache["base"] / "hostile.html"
    proc = _cachetool(cache["env"], "report", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\udcff" not in proc.stderr
    assert all(line.startswith("Warning: ") for line in proc.stderr.splitlines()), proc.stderr
    assert HOSTILE_SHOWN in proc.stderr
    page = out.read_bytes().decode("utf-8")  # valid UTF-8
    assert "\x1b" not in page
    assert html.escape(HOSTILE_SHOWN) in page


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="Chromium is not installed")
def test_report_in_a_real_browser(cache: dict[str, Any]) -> None:
    """In headless Chromium the page of a ~40-fingerprint cache loads with no console errors and
    fetches nothing; the treemap shows every dataset folder; the lineage graph draws each linear
    chain as one box, so far fewer boxes than fingerprints; the search box finds a fingerprint
    hidden inside a chain and Enter shows its details; clicking a step shows its arguments and
    files; each call site has its own row of hit rates; the findings show the hostile name escaped
    and fit the window's width."""
    assert CHROMIUM, "Chromium is missing: .ci/run installs it (apt-get install chromium)"
    from playwright.sync_api import expect, sync_playwright

    from cachetool.report.data import build_report

    out = cache["base"] / "browser.html"
    proc = _cachetool(cache["env"], "report", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    data = build_report(cache["root"], verify=False)
    home = cache["base"] / "browser-home"  # Chromium writes its profile and dconf cache in HOME
    home.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            env={**os.environ, "HOME": str(home)},
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith("file:") else None)
            page.goto(out.as_uri())
            labels = " ".join(page.locator("#treemap text").all_text_contents())
            assert "csv/" in labels and "json/" in labels, labels

            boxes = page.locator("#lineage .node")
            texts = page.locator("#lineage .node text").all_text_contents()  # one label per box
            assert doc["steps"] >= 40 and len(texts) <= doc["steps"] - 15, texts  # two chains collapsed
            shown = " ".join(texts)
            hidden = [n.fingerprint for n in data.nodes if n.fingerprint[:8] not in shown]
            assert hidden, texts
            search = page.locator("#search")
            search.fill(hidden[0][:10])
            expect(page.locator("#lineage .node.hit")).to_have_count(1)
            search.press("Enter")
            details = page.locator("#step-details")
            expect(details).to_contain_text(hidden[0])

            filters = [i for i, t in enumerate(texts) if t.startswith("filter ")]
            assert len(filters) == 2, texts  # min_len 5 and 20: two steps, two fingerprints
            search.fill("")
            shown_details = []
            for i in filters:
                boxes.nth(i).click()
                expect(details).to_contain_text(f"filter  {texts[i].split()[1]}")
                shown_details.append(details.text_content() or "")
            assert all("function: longer @ " in s and "files:" in s for s in shown_details), shown_details
            assert shown_details[0] != shown_details[1]

            expect(page.locator("#hit-rate .site")).to_have_count(doc["call_sites"])
            expect(page.locator("#problems")).to_contain_text(HOSTILE_SHOWN)
            # Long paths wrap inside the findings table: the page is no wider than the window.
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert requests == []  # nothing fetched: the page is self-contained


def test_report_of_a_saved_folder_counts_it(tmp_path: Path) -> None:
    """`report --cache-dir` of one `save_to_disk` folder counts 1 dataset folder and draws the
    folder under its own name; it said "0 dataset folder(s)" and "(top of the cache)"."""
    env = hf_env(tmp_path)
    save = "import datasets; datasets.Dataset.from_dict({'a': list(range(50))}).save_to_disk('saved')"
    forks.run(
        [sys.executable, "-c", save], env=env, cwd=tmp_path, check=True, timeout=120, preload=forks.PIPELINE
    )
    out = tmp_path / "r.html"
    proc = _cachetool(env, "report", "--cache-dir", str(tmp_path / "saved"), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert (json.loads(proc.stdout)["datasets"], json.loads(proc.stdout)["entries"]) == (1, 1)
    page = out.read_text()
    assert "(top of the cache)" not in page and ">saved<" in page
