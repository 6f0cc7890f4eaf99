"""The HTML report in a real browser: Debian's headless Chromium, no network.

Two drivers, each checked first on a control page so that the check itself can fail:

* ``chromium --headless --dump-dom --enable-logging=stderr --v=0``: the rendered DOM after the
  scripts ran, and every console message on stderr (lines ``...:CONSOLE:...``; Chromium logs them
  all at INFO, so *any* console message fails: the report never logs);
* Selenium + chromedriver: the browser log (SEVERE/WARNING entries fail), clicking headers sorts,
  no alert opens, and the ``onerror`` payload in a method name never sets ``window.__xss``.

Without Chromium (or Selenium) the tests skip, unless ``OXBENCH_REQUIRE_BROWSER`` is set (CI),
where a missing browser fails. ``.ci/browser_deps.sh`` installs chromium and chromium-driver.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_report import XSS, make_grid

import analysis
from analysis.report import write_report

REQUIRE = os.environ.get("OXBENCH_REQUIRE_BROWSER", "") not in ("", "0")
CHROMIUM = Path(os.environ.get("OXBENCH_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("OXBENCH_CHROMEDRIVER", "/usr/bin/chromedriver"))
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
BAD_PAGE = '<!DOCTYPE html><html><body><p>x</p><script>throw new Error("boom")</script></body></html>'
#: An unescaped payload: proves that the __xss probe detects a payload that runs.
UNSAFE_PAGE = f"<!DOCTYPE html><html><body>{XSS}</body></html>"


def require(ok: bool, what: str) -> None:
    """Skip when ``what`` is missing, or fail if OXBENCH_REQUIRE_BROWSER is set."""
    if ok:
        return
    if REQUIRE:
        pytest.fail(f"{what} is missing and OXBENCH_REQUIRE_BROWSER is set (run .ci/browser_deps.sh)")
    pytest.skip(
        f"{what} is missing: run .ci/browser_deps.sh (set OXBENCH_REQUIRE_BROWSER=1 to make this fail)"
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return write_report(make_grid(tmp_path_factory.mktemp("browser")))


# ---------------------------------------------------------------------------------------------
# chromium --dump-dom
# ---------------------------------------------------------------------------------------------


def dump_dom(page: Path, profile: Path) -> tuple[str, list[str]]:
    """(DOM after load, console messages) of ``page`` in headless Chromium."""
    require(CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK), f"Chromium ({CHROMIUM})")
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--dump-dom", page.resolve().as_uri()]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def test_dump_dom_catches_console_errors(tmp_path):
    """Control: a page that throws shows up in the captured console."""
    page = tmp_path / "bad.html"
    page.write_text(BAD_PAGE)
    _, console = dump_dom(page, tmp_path / "profile")
    assert any("Uncaught Error: boom" in line for line in console), console


def test_report_renders_without_console_messages(report, tmp_path):
    dom, console = dump_dom(report, tmp_path / "profile")
    assert console == []
    assert 'data-sortable="ready"' in dom  # the sorting script ran to its end
    for table in (
        "leaderboard-0",
        "leaderboard-2",
        "leverage",
        "inversions",
        "ood-spread",
        "paired-0",
        "failed",
    ):
        assert f'id="{table}"' in dom, table
    assert dom.count('<table class="sortable"') >= 10 and dom.count('class="plot"') == 5
    assert not re.search(r"<img", dom, re.IGNORECASE) and "&lt;img src=x onerror=" in dom


# ---------------------------------------------------------------------------------------------
# Selenium
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        require(False, "selenium (pip install selenium)")
    require(
        CHROMIUM.is_file() and CHROMEDRIVER.is_file(), f"Chromium/chromedriver ({CHROMIUM}, {CHROMEDRIVER})"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('profile')}", "--window-size=1300,1000"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    browser.set_page_load_timeout(60)
    yield browser
    browser.quit()


def problems(driver) -> list[str]:
    """Browser-log entries at WARNING or above since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def column_values(driver, table: str, index: int) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.getElementById(arguments[0]).tBodies[0].rows,"
        " r => r.cells[arguments[1]].getAttribute('data-sort'));",
        table,
        index,
    )


def test_selenium_probes_catch_errors_and_executed_payloads(driver, tmp_path):
    """Controls: a throwing page is logged as SEVERE, and an unescaped payload sets window.__xss."""
    (tmp_path / "bad.html").write_text(BAD_PAGE)
    driver.get((tmp_path / "bad.html").as_uri())
    assert any("boom" in m for m in problems(driver))
    (tmp_path / "unsafe.html").write_text(UNSAFE_PAGE)
    driver.get((tmp_path / "unsafe.html").as_uri())
    assert driver.execute_script("return window.__xss") == 1
    problems(driver)


def test_report_in_browser_sorts_and_never_runs_payloads(driver, report):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    driver.get(report.as_uri())
    assert problems(driver) == []
    assert driver.execute_script("return window.__xss") is None
    assert driver.find_elements(By.TAG_NAME, "img") == [] and driver.find_elements(By.TAG_NAME, "script")
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018 (the property access is the check)
    names = column_values(driver, "leaderboard-0", 0)
    assert XSS in names  # shown as text, the exact string

    headers = driver.find_elements(By.CSS_SELECTOR, "#leaderboard-0 thead th")
    labels = [h.text for h in headers]
    method, mean = headers[0], headers[labels.index("accuracy (%) [95% CI]")]
    method.click()
    assert column_values(driver, "leaderboard-0", 0) == sorted(names, key=str.lower)
    assert method.get_attribute("aria-sort") == "ascending"
    mean.click()  # numbers sort descending first
    runs = analysis.load_runs(report.parent)
    tiny = analysis.summarize(runs)
    tiny = tiny[tiny["scale"] == "tiny"].sort_values("mean", ascending=False)
    assert column_values(driver, "leaderboard-0", 0) == tiny["method"].tolist()
    mean.click()
    assert column_values(driver, "leaderboard-0", 0) == tiny["method"].tolist()[::-1]
    assert mean.get_attribute("aria-sort") == "ascending" and method.get_attribute("aria-sort") is None

    p_adj = headers[labels.index("p_adj")]
    for _ in range(2):  # the baseline has no p-value: last in both directions
        p_adj.click()
        assert column_values(driver, "leaderboard-0", labels.index("p_adj"))[-1] == ""
    assert problems(driver) == []
