"""The report's page, index.html: its parts, and the pages of a small sweep (through real Ray and
a real SQLite MLflow store in a temp dir) and of a comparison in a real browser, headless
Chromium (Debian's chromium and chromium-driver, which .ci/run installs) driven by Selenium.
The browser tests are skipped where Chromium or its driver is missing."""

import base64
import contextlib
import dataclasses
import io
import json
import math
import re
import shutil
import struct
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from sdyn import report as report_cli
from sdyn.analysis import html, tables
from sdyn.analysis import report as report_mod
from sdyn.sweep import main
from sdyn.tracking import uri as uris

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
in_chromium = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="headless Chromium not installed (.ci/run installs chromium and chromium-driver)",
)
SWEEP = ["+grid=width", "grid.n=[8,16,32,64]", "grid.widths=[4,16,64,256]", "grid.seeds=2"]
SWEEP += ["experiment.steps=300", "sweep.progress=false"]
WINDOW = (1200, 900)
# About A4's printable width at 96 px per inch: a page this wide must not be cut at its right.
PRINT_WIDTH = 720
SVG = """<?xml version="1.0" encoding="utf-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="234pt" height="100pt" viewBox="0 0 234 100"
 xmlns="http://www.w3.org/2000/svg" version="1.1"><metadata>made by hand</metadata>
<defs><clipPath id="p1"><rect x="0" y="0" width="10" height="10"/></clipPath>
<path id="glyph" d="M 0 0 L 1 1"/></defs>
<g id="figure_1" clip-path="url(#p1)"><use xlink:href="#glyph"/><a href="#elsewhere"/></g></svg>
"""


def test_an_inline_svg_keeps_its_ids_to_itself(tmp_path):
    (tmp_path / "a.svg").write_text(SVG)
    one = html.inline_svg(tmp_path / "a.svg", "c0", "a <claim>")
    two = html.inline_svg(tmp_path / "a.svg", "c1", "another")
    assert one.startswith('<svg class="plot" role="img" aria-label="a &lt;claim&gt;" ')
    assert "<?xml" not in one and "DOCTYPE" not in one and "metadata" not in one
    assert 'id="c0-p1"' in one and 'clip-path="url(#c0-p1)"' in one
    assert 'xlink:href="#c0-glyph"' in one and 'id="c1-glyph"' in two
    assert 'href="#elsewhere"' in one  # not an id of the figure's: left as it is


def test_a_figure_without_svg_is_its_png_inline(tmp_path):
    png = tmp_path / "scatter.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    markup = html.figure_markup(png, "f0", "scatter")
    assert markup == '<img class="plot" alt="scatter" src="data:image/png;base64,iVBORw0KGgo=">'
    assert html.figure_markup(tmp_path / "absent.png", "f1", "absent") is None


def test_links_to_mlflow_on_a_server_and_the_command_without_one():
    url = uris.mlflow_url("http://mlflow:5000/", "3", "ab12")
    assert url == "http://mlflow:5000/#/experiments/3/runs/ab12?workflowType=machine_learning"
    assert uris.mlflow_url("sqlite:///m.db", "3", "ab12") is None
    assert html.mlflow_ui_command("sqlite:///m.db") == (
        f"mlflow ui --backend-store-uri sqlite:///{Path('m.db').resolve()}"
    )
    runs = _runs("http://mlflow:5000")
    where = html.TEMPLATES.get_template("macros.html.j2").module.mlflow_where(html._mlflow(runs))
    assert 'href="http://mlflow:5000/#/experiments/3/runs/parent?workflowType=' in where
    assert "mlflow ui" not in where


def _runs(uri: str) -> pd.DataFrame:
    """A sweep's runs: two grid points of 2 seeds, one recorded by this sweep's cell run c1,
    one copied from another sweep (no cell under this parent)."""
    runs = pd.DataFrame(
        {
            "run_id": ["c1", "c1", math.nan, math.nan],
            "status": ["converged", "diverged", "converged", "converged"],
            "parent_run_id": ["parent", "parent", "other", "other"],
            "experiment.n": [16, 16, 8, 8],
            "experiment.steps": [100, 100, 100, 100],
            "data.name": ["sphere"] * 4,
        }
    )
    runs.attrs.update({"tracking_uri": uri, "experiment_id": "3", "parent_run_id": "parent"})
    return runs


def test_cells_along_the_grid_and_runs_copied_from_another_sweep():
    rows = html.cells(_runs("sqlite:///m.db"))
    assert [(r["point"], r["statuses"], r["run_id"], r["parent"]) for r in rows] == [
        ("n=8", "converged 2", "", "other"),
        ("n=16", "converged 1, diverged 1", "c1", "parent"),
    ]
    assert rows[1]["url"] is None  # no server to link to
    served = html.cells(_runs("https://mlflow"))
    assert (
        served[1]["url"] == "https://mlflow/#/experiments/3/runs/c1?workflowType=machine_learning"
    )


def _printed(call, *args) -> list[str]:
    """``call(*args)``, which must return 0, and the lines it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert call(*args) == 0
    return out.getvalue().splitlines()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A small sweep (its report in ``out/tiny``), and a comparison (``out/compare``) of its
    report with a copy of it under another name (whose own page does not exist)."""
    tmp = tmp_path_factory.mktemp("html")
    uri = f"sqlite:///{tmp}/mlflow.db"
    args = [*SWEEP, f"tracking.uri={uri}", f"sweep.out_dir={tmp}/out", "sweep.name=tiny"]
    lines = _printed(main, args)
    rep = report_mod.build("tiny", uri, tmp / "out" / "tiny")
    report_cli.compare([rep, dataclasses.replace(rep, sweep="copy")], tmp / "out" / "compare")
    return {"out": tmp / "out", "uri": uri, "lines": lines, "runs": rep.runs, "report": rep}


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    yield driver
    driver.quit()


def _open(driver, page: Path) -> None:
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    driver.set_window_size(*WINDOW)
    driver.get(page.resolve().as_uri())


def _figures_drawn(driver) -> int:
    """How many figures the page shows, checking each: an inline SVG drawn with a size and
    paths, an image decoded (naturalWidth > 0)."""
    images = driver.execute_script(
        "return [...document.images].map(i => [i.complete, i.naturalWidth]);"
    )
    assert all(complete and width > 0 for complete, width in images), images
    svgs = driver.execute_script(
        "return [...document.querySelectorAll('svg.plot')].map(s => {"
        " const r = s.getBoundingClientRect();"
        " return [r.width, r.height, s.querySelectorAll('path, use').length]; });"
    )
    assert all(w > 100 and h > 50 and parts > 0 for w, h, parts in svgs), svgs
    return len(images) + len(svgs)


def _sound(driver) -> None:
    """No error or warning on the browser's console, every id once in the page."""
    assert [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
    ids = driver.execute_script("return [...document.querySelectorAll('[id]')].map(e => e.id);")
    assert len(ids) == len(set(ids))


def _screenshot_fills_the_window(driver) -> None:
    png = driver.get_screenshot_as_png()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    inner = driver.execute_script(
        "return [innerWidth * devicePixelRatio, innerHeight * devicePixelRatio];"
    )
    assert [width, height] == [round(x) for x in inner]


def _prints_whole(driver) -> None:
    """Printed (print media, about A4's width), nothing runs past the page's right edge, and
    Chromium prints it as a PDF."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    driver.set_window_size(PRINT_WIDTH, WINDOW[1])
    wide = driver.execute_script(
        "const edge = document.documentElement.clientWidth;"
        "return [...document.querySelectorAll('table, svg.plot, img, pre, ol')]"
        " .filter(e => e.getBoundingClientRect().right > edge + 1)"
        " .map(e => e.outerHTML.slice(0, 80));"
    )
    assert wide == []
    pdf = base64.b64decode(driver.print_page())
    assert pdf.startswith(b"%PDF") and len(pdf) > 20_000


@pytest.mark.slow
def test_a_sweep_names_its_page_last(sweep):
    out, parent = sweep["out"], sweep["runs"].attrs["parent_run_id"]
    assert sweep["lines"][-1].startswith(
        f"sdyn: report in {out}/tiny/index.html and on MLflow parent run {parent} (MLflow: "
    )
    # The page is on the parent run too, beside the other report files.
    logged = MlflowClient(sweep["uri"]).list_artifacts(parent, "report")
    assert "report/index.html" in {f.path for f in logged}


@pytest.mark.slow
@in_chromium
def test_sweep_page_in_chromium(sweep, browser):
    out = sweep["out"] / "tiny"
    report = json.loads((out / "report.json").read_text())
    _open(browser, out / "index.html")
    assert browser.title == "sdyn report: tiny"
    assert _figures_drawn(browser) == len(list(out.glob("*.svg")))  # every claim's and figure's
    rows = browser.execute_script(
        "return [...document.querySelectorAll('table.verdicts tbody tr')].map(r =>"
        " [r.cells[0].innerText, r.cells[3].innerText, r.className]);"
    )
    assert [[c["claim"], c["verdict"]] for c in report["claims"]] == [r[:2] for r in rows]
    assert all(css == html.verdict_class(verdict) for _, verdict, css in rows)
    absent = browser.execute_script(
        "return [...document.querySelectorAll('ul.not-measured li')].map(l => l.innerText);"
    )
    assert absent == [f"{c['claim']}: {c['reason']}" for c in report["not_measured"]]
    censored = browser.find_element("css selector", "table.censoring").text
    assert all(c["claim"] in censored for c in report["claims"] if c["kind"].startswith("thresh"))
    text = browser.find_element("tag name", "body").text
    assert f"mlflow ui --backend-store-uri {sweep['uri']}" in text
    runs = sweep["runs"]
    assert runs.attrs["parent_run_id"] in text
    assert all(run_id in text for run_id in runs["run_id"])  # every cell, by its run id
    _sound(browser)
    _screenshot_fills_the_window(browser)
    _prints_whole(browser)


@pytest.mark.slow
@in_chromium
def test_comparison_page_in_chromium(sweep, browser):
    out = sweep["out"] / "compare"
    compare = json.loads((out / "compare.json").read_text())
    _open(browser, out / "index.html")
    assert _figures_drawn(browser) == len(list(out.glob("*.svg")))
    heads = browser.execute_script(
        "return [...document.querySelectorAll('table.verdicts th')].map(h => h.innerText);"
    )
    assert heads == ["claim", "theory", "[1] tiny", "[2] copy"]
    cells = browser.execute_script(
        "return [...document.querySelectorAll('table.verdicts tbody tr')].flatMap(r =>"
        " [...r.querySelectorAll('td[data-verdict]')]"
        " .map(c => [r.dataset.claim, c.dataset.verdict]));"
    )
    assert sorted(cells) == sorted([c["claim"], c["verdict"]] for c in compare["claims"])
    assert browser.find_elements("link text", "copy") == []  # it has no page of its own
    browser.find_element("link text", "tiny").click()  # the sweep's own page, beside it
    assert browser.title == "sdyn report: tiny"
    browser.back()
    _sound(browser)
    _prints_whole(browser)


def test_a_comparison_says_which_sweep_does_not_measure_a_claim(sweep, tmp_path):
    rep = sweep["report"]
    measured = [r for r in rep.results if r.measured]
    fewer = dataclasses.replace(rep, sweep="fewer", results=measured[1:])
    text = report_cli.compare([rep, fewer], tmp_path)
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {measured[0].label} ")]
    assert row.replace(" ", "").endswith("|notmeasured|") and "nan" not in text  # was nan


def test_a_norm_in_a_markdown_cell_does_not_split_it():
    table = pd.DataFrame({"claim": ["drift"], "reason": ["||H(t) - H(0)||_F <= 0.5"]})
    header, rule, row = tables.markdown_table(table).splitlines()
    cells = re.split(r"(?<!\\)\|", row)[1:-1]
    assert len(cells) == len(re.split(r"(?<!\\)\|", header)[1:-1]) == 2, row
    assert cells[1].strip() == r"\|\|H(t) - H(0)\|\|_F <= 0.5"


def test_a_report_with_no_run_recorded_has_no_empty_parentheses(tmp_path):
    runs = pd.DataFrame({"status": pd.Series([], dtype=str)})
    runs.attrs["planned"] = 4
    text = report_mod.write([], runs, tmp_path, "s", search=False)
    assert text.splitlines()[0] == "sweep s: 0 of 4 planned runs recorded"
