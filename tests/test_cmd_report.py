"""`cachetool report`: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

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

    reviews = load_dataset("csv", data_files=os.path.join(here, "reviews.csv"), split="train")
    reviews = reviews.map(lambda ex: {"n": len(ex["text"])})
    reviews = reviews.filter(longer, fn_kwargs={})
    notes = load_dataset("json", data_files=os.path.join(here, "notes.jsonl"), split="train")
    notes = notes.shuffle(seed=7)
    """
)


def _cachetool(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachetool", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A cache with two dataset folders, two recorded runs (the second changes a global, so one
    call site misses again) and a leftover of a killed writer."""
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
    for min_len in ("5", "5", "20"):
        proc = _cachetool(env, "run", "pipeline.py", min_len, cwd=work)
        assert proc.returncode == 0, proc.stderr[-2000:]
    root = base / "cache"
    csv_dir = next(p.parent for p in (root / "csv").glob("*/*/*/dataset_info.json"))
    leftover = csv_dir / "tmpab12cd34"
    leftover.write_bytes(b"")
    os.utime(leftover, (0, 7200))
    return {"env": env, "root": root, "base": base}


def test_report_json_counts_what_the_cache_holds(cache: dict[str, Any]) -> None:
    """`report --json` writes the page and says what it drew: both dataset folders, every recorded
    step, both call sites' runs, and the leftover."""
    out = cache["base"] / "r.html"
    proc = _cachetool(cache["env"], "report", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 1
    assert doc["output"] == str(out)
    assert doc["bytes"] == out.stat().st_size
    assert doc["datasets"] == 2
    assert doc["steps"] >= 5  # csv, map, filter (two versions), json, shuffle
    assert [p["what"].split(",")[0] for p in doc["problems"] if p["source"] == "leftover"] == ["temp"]
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


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="Chromium is not installed")
def test_report_in_a_real_browser(cache: dict[str, Any]) -> None:
    """In headless Chromium the page loads with no console errors, the treemap shows every dataset
    folder, and clicking a lineage step shows its arguments and files."""
    assert CHROMIUM, "Chromium is missing: .ci/run installs it (apt-get install chromium)"
    from playwright.sync_api import expect, sync_playwright

    out = cache["base"] / "browser.html"
    proc = _cachetool(cache["env"], "report", "-o", str(out), "--no-verify")
    assert proc.returncode == 0, proc.stderr
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
            page = browser.new_page(viewport={"width": 1200, "height": 1800})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith("file:") else None)
            page.goto(out.as_uri())
            page.wait_for_selector("#treemap .main-svg")
            page.wait_for_selector("#lineage .main-svg")
            labels = " ".join(page.locator("#treemap text").all_text_contents())
            assert "csv/" in labels and "json/" in labels, labels
            steps = page.locator("#lineage .scatterlayer .trace").nth(1).locator(".point")
            texts = page.locator("#lineage .scatterlayer .trace").nth(1).locator("text").all_text_contents()
            filters = [i for i, t in enumerate(texts) if t.startswith("filter ")]
            assert len(filters) == 2, texts  # min_len 5 and 20: two steps, two fingerprints
            shown = []
            details = page.locator("#step-details")
            clicked = -1.0
            for i in filters:
                # Two clicks within Plotly's double-click delay (300 ms) are one double click: a
                # click comes 500 ms after the previous one returned, at the earliest.
                page.wait_for_timeout(max(0.0, clicked + 0.5 - time.monotonic()) * 1000)
                steps.nth(i).click(force=True)
                clicked = time.monotonic()
                fp8 = texts[i].split()[1]
                expect(details).to_contain_text(f"filter  {fp8}")  # the click's handler has run
                shown.append(details.text_content() or "")
            assert all("function: longer @ " in s and "files:" in s for s in shown), shown
            assert shown[0] != shown[1]
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert requests == []  # nothing fetched: the page is self-contained
