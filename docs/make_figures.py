"""Make the figures of the docs' experiment pages in docs/img/ from each page's sweep.

Each page's sweep runs, and the PNGs the page shows are copied from its report into docs/img/;
with the NTK page, Getting started's ``report.png``: the top of the main job's index.html down to
its first claim, in headless Chromium (Selenium, a dev dependency; ``chromium`` and
``chromedriver`` on the PATH) at 1280 px:

    python docs/make_figures.py                    # all: ntk, score, attention, implicit_bias
    python docs/make_figures.py ntk implicit_bias  # some pages
    python docs/make_figures.py --cpus 1           # cluster.num_cpus=1: leave the other cores free
    python docs/make_figures.py --from DIR         # copy from DIR/<sweep>/ (an outputs/ folder)

The sweeps run in ``--work`` (default ``.docs-figures/`` at the repository root, ignored by git),
with their own MLflow store there: a second call trains nothing and redraws the reports. On the
2-core development machine (2026-11-26) the four pages' sweeps take about 5 minutes, most of it
``--sweep score_samples``.
"""

from __future__ import annotations

import argparse
import base64
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"

# page: [(sweep arguments, the sweep's name (its outputs/ folder), {report PNG: docs/img name})]
PAGES = {
    "ntk": [
        (
            ["+grid=width"],
            "ntk-width-sphere",
            {
                "width_threshold.png": "width_threshold.png",
                "weight_movement.png": "ntk_weight_movement.png",
                "curves.png": "ntk_curves.png",
            },
        )
    ],
    "score": [
        (
            ["--sweep", "score_samples"],
            "score_samples",
            {
                "curves.png": "score_curves.png",
                "samples.png": "score_samples.png",
                "score_error.png": "score_error.png",
            },
        )
    ],
    "attention": [
        (
            ["--sweep", "attention_fig12"],
            "attention_fig12",
            {
                "fig1.png": "attention_fig1.png",
                "fig2.png": "attention_fig2.png",
                "adam.png": "attention_adam.png",
            },
        )
    ],
    "implicit_bias": [
        (["--sweep", "implicit_fig2"], "implicit_fig2", {"fig2.png": "implicit_fig2.png"}),
        (["--sweep", "implicit_fig3"], "implicit_fig3", {"fig3.png": "implicit_fig3.png"}),
    ],
}


# page: (its sweep's name, docs/img name) of the report page shown as a screenshot.
SCREENSHOTS = {"ntk": ("ntk-width-sphere", "report.png")}
SCREENSHOT_WIDTH = 1280  # px, CSS pixels at scale 1


def screenshot(page: Path, target: Path) -> None:
    """Save the top of a report's ``page`` (its index.html) down to its first claim's article as
    a PNG ``target``, ``SCREENSHOT_WIDTH`` px wide, in headless Chromium.

    Raises selenium's ``WebDriverException`` where Chromium or chromedriver is missing."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    service = webdriver.ChromeService(shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_window_size(SCREENSHOT_WIDTH, 1000)
        driver.get(page.resolve().as_uri())
        bottom = driver.execute_script(
            "const claim = document.querySelector('article.claim');"
            "return Math.ceil(claim.getBoundingClientRect().bottom + scrollY) + 16;"
        )
        clip = {"x": 0, "y": 0, "width": SCREENSHOT_WIDTH, "height": bottom, "scale": 1}
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "clip": clip, "captureBeyondViewport": True},
        )
    finally:
        driver.quit()
    target.write_bytes(base64.b64decode(shot["data"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", help=f"of {', '.join(PAGES)} (default: every page)")
    parser.add_argument(
        "--work", type=Path, default=ROOT / ".docs-figures", help="where the sweeps run"
    )
    parser.add_argument("--cpus", type=int, default=None, help="cluster.num_cpus of each sweep")
    parser.add_argument(
        "--from", dest="source", type=Path, help="an outputs/ folder to copy from, not running"
    )
    args = parser.parse_args(argv)
    unknown = [page for page in args.pages if page not in PAGES]
    if unknown:
        parser.error(f"unknown page {', '.join(unknown)}: pages are {', '.join(PAGES)}")
    IMG.mkdir(parents=True, exist_ok=True)
    for page in args.pages or list(PAGES):
        for sweep_args, name, pngs in PAGES[page]:
            outputs = args.source
            if outputs is None:
                args.work.mkdir(parents=True, exist_ok=True)
                command = [sys.executable, "-m", "sdyn.sweep", *sweep_args, "sweep.progress=false"]
                if args.cpus:
                    command.append(f"cluster.num_cpus={args.cpus}")
                print("$", " ".join(command[1:]), flush=True)
                done = subprocess.run(command, cwd=args.work)
                if done.returncode != 0:
                    print(f"make_figures: {name} failed (exit {done.returncode})", file=sys.stderr)
                    return done.returncode
                outputs = args.work / "outputs"
            for png, target in pngs.items():
                shutil.copyfile(outputs / name / png, IMG / target)
                print(f"docs/img/{target} <- {outputs / name / png}")
            if SCREENSHOTS.get(page, (None,))[0] == name:
                target = SCREENSHOTS[page][1]
                screenshot(outputs / name / "index.html", IMG / target)
                print(f"docs/img/{target} <- {outputs / name / 'index.html'} (Chromium)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
