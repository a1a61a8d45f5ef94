#!/usr/bin/python3
"""The run report as a person sees it: a real run's report.html opened in headless Chromium
(Debian's `chromium`, installed by scripts/setup.sh). The page must load without console
errors, hold its charts once rendered, and its screenshot must not be blank.
Usage: test_report_render.py BIGBATCH_BINARY [unittest arguments]."""
import os
import shutil
import subprocess
import tempfile
import unittest

from e2e_common import main, run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args):
    # A private profile; no sandbox (CI runs as root); logging of the page's console to stderr.
    profile = tempfile.mkdtemp(prefix="bigbatch_chromium_")
    try:
        return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--no-first-run", f"--user-data-dir={profile}", "--enable-logging=stderr",
                               "--v=0", *args], capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@unittest.skipUnless(CHROMIUM, "chromium is not installed (scripts/setup.sh installs it)")
class ReportRenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bigbatch_report_")
        cls.run_dir = os.path.join(cls.dir, "run")
        run("train", "--model", "mlp", "--hidden", "64", "--train-subset", "2048", "--val-size", "256",
            "--global-batch", "128", "--micro-batch", "32", "--epochs", "3", "--threads", "1", "--progress", "off",
            "--out", cls.run_dir, check=True, timeout=None)
        cls.url = "file://" + os.path.join(cls.run_dir, "report.html")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_page_renders_its_charts_without_console_errors(self):
        result = chromium("--dump-dom", self.url)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        dom = result.stdout
        self.assertEqual(dom.count("<svg "), 9, dom[:500])
        self.assertIn("loss against updates", dom)
        self.assertIn("gradient noise scale beside the global batch", dom)
        self.assertGreaterEqual(dom.count("<polyline"), 9)
        console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        self.assertEqual(console, [])

    def test_a_comparison_of_two_runs_renders_both(self):
        other = os.path.join(self.dir, "batch-512")
        run("train", "--model", "mlp", "--hidden", "64", "--train-subset", "2048", "--val-size", "256",
            "--global-batch", "512", "--micro-batch", "128", "--epochs", "3", "--threads", "1", "--progress", "off",
            "--out", other, check=True, timeout=None)
        page = os.path.join(self.dir, "compare.html")
        run("report", self.run_dir, other, "--out", page, check=True)
        result = chromium("--dump-dom", "file://" + page)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        dom = result.stdout
        self.assertIn("2 runs compared", dom)
        self.assertIn("training loss (smoothed) against samples", dom)
        self.assertIn("validation accuracy against samples", dom)
        self.assertNotIn("bits per byte", dom, "no run has it: the chart is left out")
        self.assertEqual(dom.count("<svg "), 8, dom[:500])  # bits per byte left out
        for d in (self.run_dir, other):
            self.assertGreaterEqual(dom.count(d), 2)  # the table and the legends
        console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        self.assertEqual(console, [])

    def test_screenshot_is_not_blank(self):
        from PIL import Image, ImageStat
        shot = os.path.join(self.dir, "shot.png")
        result = chromium("--window-size=1280,1600", f"--screenshot={shot}", self.url)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        image = Image.open(shot).convert("RGB")
        self.assertEqual(image.size, (1280, 1600))
        colours = image.getcolors(maxcolors=1 << 20)
        self.assertGreater(len(colours), 50)  # text, lines in several colours, anti-aliasing
        background = max(colours)[0] / (image.size[0] * image.size[1])
        self.assertLess(background, 0.97, "the page is (almost) one colour")
        # The charts' lines are there: pixels of the palette's blue (train loss) and orange.
        rgb = set(c for _, c in colours)
        self.assertTrue(any(abs(r - 0x00) < 40 and abs(g - 0x72) < 40 and abs(b - 0xB2) < 40 for r, g, b in rgb))
        self.assertGreater(ImageStat.Stat(image).stddev[0], 10)


if __name__ == "__main__":
    main(verbosity=2)
