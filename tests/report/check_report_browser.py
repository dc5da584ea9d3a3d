"""The HTML report as a person sees it: renders the repo's docs/data/*.jsonl (a section per
file) and an overlay of two files with `dtrain report`, loads each page in headless Chromium,
takes a screenshot, and checks that the page logged no console error and that every chart
has its SVG with data points. The checker first proves it can fail, on pages made broken on
purpose. Exit 77 (ctest: skipped) with a message where Chromium is not installed.

usage: check_report_browser.py DTRAIN_BINARY SOURCE_DIR [--screenshots DIR]
"""
import glob
import html.parser
import os
import shutil
import subprocess
import sys
import tempfile

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0"]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def browse(browser, page, args):
    """Runs Chromium on a page; returns (stdout, console lines from its log)."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([browser] + CHROMIUM_FLAGS + [f"--user-data-dir={profile}"] + args +
                              ["file://" + os.path.abspath(page)], capture_output=True,
                              text=True, timeout=180)
    console = [l for l in done.stderr.splitlines() if ":CONSOLE" in l]
    return done.stdout, console


class Charts(html.parser.HTMLParser):
    """Counts, per <figure class="chart-figure">, its <svg> elements and data points."""

    def __init__(self):
        super().__init__()
        self.figures = []  # [svgs, points, title]
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "figure" and "chart-figure" in classes:
            self.figures.append([0, 0, ""])
            self.depth = 1
        elif self.depth and tag == "figure":
            self.depth += 1
        if not self.depth:
            return
        if tag == "svg":
            self.figures[-1][0] += 1
        if tag in ("circle", "rect") and ("pt" in classes or "bar" in classes):
            self.figures[-1][1] += 1

    def handle_endtag(self, tag):
        if self.depth and tag == "figure":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and not self.figures[-1][2]:
            self.figures[-1][2] = data.strip()


def problems_of(browser, page, screenshot):
    """What is wrong with the page as loaded in the browser (empty: nothing)."""
    dom, console = browse(browser, page, ["--dump-dom"])
    found = [f"console: {line}" for line in console]
    charts = Charts()
    charts.feed(dom)
    if not charts.figures:
        found.append("no charts in the loaded page")
    for svgs, points, title in charts.figures:
        if svgs != 1 or points == 0:
            found.append(f"chart '{title}': {svgs} svg, {points} data points")
    _, console = browse(browser, page, [f"--screenshot={screenshot}", "--window-size=1500,2200"])
    found += [f"console (screenshot): {line}" for line in console]
    if not os.path.exists(screenshot) or os.path.getsize(screenshot) < 20000:
        found.append(f"screenshot {screenshot} missing or blank")
    return found, len(charts.figures)


def report(binary, out, files, *flags):
    subprocess.run([binary, "report", *files, "-o", out, *flags], check=True, timeout=120,
                   stderr=subprocess.DEVNULL)


def main():
    binary, source = sys.argv[1], sys.argv[2]
    keep = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--screenshots" else None
    browser = chromium()
    if browser is None:
        print("SKIP: chromium is not installed (scripts/install-deps.sh installs Debian's "
              "chromium)")
        return 77
    data = sorted(glob.glob(os.path.join(source, "docs", "data", "*.jsonl")))
    with tempfile.TemporaryDirectory() as tmp:
        # The checker must fail where it should: a console error, and a chart with no points.
        broken = os.path.join(tmp, "broken.html")
        with open(broken, "w") as f:
            f.write('<html><body><figure class="chart-figure"><figcaption>x</figcaption>'
                    '<svg class="chart"></svg></figure><script>console.error("broken on '
                    'purpose")</script></body></html>')
        found, _ = problems_of(browser, broken, os.path.join(tmp, "broken.png"))
        assert any("broken on purpose" in p for p in found), found
        assert any("0 data points" in p for p in found), found

        # A run's own report: curves over steps and time, and a pipeline step per rank
        # drawn from the run's trace.
        run_page = os.path.join(tmp, "run.html")
        subprocess.run([binary, "train", "-n", "2", "--parallel", "pipeline", "--placement",
                        "ushape", "--model", "mlp", "--dataset", "synthetic", "--input-shape",
                        "1,8,8", "--num-classes", "4", "--synthetic-size", "512", "--epochs", "2",
                        "--batch-size", "32", "--chunks", "4", "--no-progress", "--report",
                        run_page, "--trace", os.path.join(tmp, "run.json")],
                       check=True, timeout=180, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        with open(run_page) as f:
            html = f.read()
        for section in ("Training curves", "A pipeline step, per rank", "Training"):
            assert f"<h2>{section}</h2>" in html, f"the run's report lacks '{section}'"
        pages = {"all-per-file": (data, ["--per-file"]),
                 "overlay": ([os.path.join(source, "docs/data/ddp-compress.jsonl"),
                              os.path.join(source, "docs/data/pipeline-ablation.jsonl")], [])}
        pages["run"] = ([], [])
        failed = False
        for name, (files, flags) in pages.items():
            page = os.path.join(tmp, name + ".html")
            if name != "run":
                report(binary, page, files, *flags)
            shot = os.path.join(keep or tmp, name + ".png")
            found, charts = problems_of(browser, page, shot)
            print(f"{name}: {charts} charts from {len(files)} files, screenshot {shot}: "
                  f"{'ok' if not found else 'FAILED'}")
            for p in found:
                print("  " + p)
            failed = failed or bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
