"""The HTML report (content, and rendered in a real headless browser) and JUnit XML, from a store
filled with synthetic runs (no model runs: these tests are about the reports)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.html_report import SERIES_COLORS, render_html
from harness.junit import junit_document
from harness.result import JUNIT_FIELDS, Result
from harness.status import Kind, Status
from harness.store import ResultStore

WINDOW = (1280, 2600)


def _fill_store(path: Path, runs: int = 5) -> list[str]:
    """``runs`` runs per target of suite smoke, pass rates rising over time, plus one zoo run."""
    rng = random.Random(0)
    ids = []
    with ResultStore(path) as store:
        for k in range(runs):
            for target in ("crucible-cpp", "inductor"):
                run_id = f"smoke-{target}-{k}"
                store.create_run(run_id, "smoke", target, {"mode": "train", "torch": "2.x"})
                store.db.execute("UPDATE runs SET created = ? WHERE id = ?", (1.7e9 + 3600 * k, run_id))
                for i in range(30):
                    source = ("timm", "opinfo", "zoo")[i % 3]
                    # pass rates rise run by run: 40% of the entries pass in the first, 80% in the last
                    good = (i + (target == "inductor")) % 10 >= 6 - k
                    status = Status.PASS if good else (Status.FAIL_ACCURACY, Status.FAIL_COMPILE,
                                                       Status.EAGER_FAIL)[(i // 3) % 3]
                    store.record(run_id, Result(
                        name=f"{source}/m{i}", suite=source, target=target, status=status,
                        phase="compare" if status != Status.FAIL_COMPILE else "backward", mode="train",
                        capture_coverage=0.6 + 0.08 * k, compile_s=10 ** rng.uniform(-1, 1.5),
                        error=None if good else "RuntimeError: planted \x1b[31mfailure\x1b[0m 0x1234 <&>",
                        break_reasons=[{"reason": "GB0124: Tensor.item()", "category": "data-dependent",
                                        "frame": "m.py:3"}] if i % 5 == 0 else []))
                ids.append(run_id)
        store.db.commit()
    return ids


def test_html_report_content(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    ids = _fill_store(db)
    with ResultStore(db) as store:
        run = store.run(ids[-1])
        page = render_html(run, store.results(ids[-1]), list(store.iter_all()))
    assert "<script" not in page and "http://" not in page and "https://" not in page  # self-contained
    assert page.count("<svg") == 4  # two trend plots, status bars, compile-time histogram
    assert "10 run(s) of suite smoke in mode train in the store, 2 target(s)" in page
    # one line per target over the history, one point per run
    assert page.count("<polyline") == 4 and page.count("<circle") == 20
    assert "GB0124: Tensor.item()" in page and "compile time (s), 30 entries" in page
    assert "crucible run --entry " in page and "--target inductor --mode train" in page
    assert "&lt;&amp;&gt;" in page and "<&>" not in page  # errors are escaped


def _one_of_each() -> list[Result]:
    """A result of every status; the worker deaths once in an eager-side phase (the model's own) and
    once while compiling (the compiler's); xfail and xpass with what was expected."""
    results = []
    for status in Status:
        phases = ("build", "compile") if status in (Status.TIMEOUT, Status.CRASH, Status.OOM) else ("compare",)
        for phase in phases:
            expected = "fail_compile: no lowering yet" if status.kind is Kind.EXPECTED or status == Status.XPASS \
                else None
            results.append(Result(name=f"zoo/{status}-{phase}", target="crucible-sim", status=status, phase=phase,
                                  suite="zoo", mode="inference", expected=expected, error=f"planted {status}",
                                  rmse_ratio=1.5, compile_s=0.25))
    return results


RUN = {"id": "r1", "suite": "zoo", "target": "crucible-sim", "finished": True,
       "metadata": {"corpus": ["/data/my corpus"], "device": "cpu"}}


def test_every_status_renders_in_html_and_junit() -> None:
    results = _one_of_each()
    page = render_html(RUN, results)
    for status in Status:  # each in the bars and in the legend, in its own colour
        assert page.count(f'fill="{status.color}"') >= 2, status
        assert f">{status}</text>" in page, status
    legend = [page.index(f">{status}</text>") for status in Status]
    assert legend == sorted(legend)  # the legend follows the enum's order
    # an improvement and an expected failure show what was expected and why
    improved = page.split("<h2>Improved (xpass)")[1].split("<h2>")[0]
    assert "zoo/xpass-compare" in improved and "fail_compile" in improved and "no lowering yet" in improved
    expected = page.split("<h2>Expected failures (xfail)</h2>")[1]
    assert "zoo/xfail-compare" in expected and "no lowering yet" in expected and "planted xfail" in expected
    # the failures tables: the compiler's failures apart from the model's own, with paste-able commands
    compiler = page.split("<h2>Failures</h2>")[1].split("<h2>")[0]
    model = page.split("<h2>Not counted against the compiler")[1].split("<h2>")[0]
    assert "zoo/crash-compile" in compiler and "zoo/crash-build" not in compiler
    assert "zoo/crash-build" in model and "zoo/eager_fail-compare" in model and "zoo/xfail-compare" not in model
    assert "--corpus &#x27;/data/my corpus&#x27; --device cpu" in compiler

    root = junit_document(RUN, results).getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    for r in results:
        case = cases[r.name]
        failure, skipped = case.find("failure"), case.find("skipped")
        if r.against_compiler:
            assert failure is not None and failure.get("type") == r.status.value and skipped is None
        elif r.status.passed:
            assert failure is None and skipped is None
        else:
            assert skipped is not None and failure is None, r.name
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert set(props) - {"improved"} == {f for f in JUNIT_FIELDS if getattr(r, f) is not None}
    assert "improved" in {p.get("name") for p in cases["zoo/xpass-compare"].iter("property")}
    assert "expected fail_compile (no lowering yet)" in cases["zoo/xfail-compare"].find("skipped").get("message")
    assert int(root.get("failures")) == sum(r.against_compiler for r in results)


def test_junit_skips_the_models_own_crashes_timeouts_and_ooms() -> None:
    """Regression: JUnit marked a crash, timeout or OOM while building or running the model in eager
    as a failure of the compiler, although the report and the pytest plugin did not count it."""
    results = [Result(name=f"zoo/{status}-{phase}", target="eager", status=status, phase=phase, suite="zoo",
                      error="worker died")
               for status in (Status.CRASH, Status.TIMEOUT, Status.OOM) for phase in ("load", "build", "eager",
                                                                                     "reference", "compile")]
    root = junit_document({"id": "r", "suite": "zoo", "target": "eager"}, results).getroot()
    for case in root.iter("testcase"):
        eager_side = not case.get("name").endswith("-compile")
        assert (case.find("skipped") is not None) == eager_side, case.get("name")
        assert (case.find("failure") is not None) == (not eager_side), case.get("name")
    assert root.get("failures") == "3" and root.get("skipped") == "12"


def test_report_html_of_a_sim_run_with_a_memory_finding(cli, tmp_path: Path) -> None:
    """Regression: `crucible report --html` failed with "error: 'fail_memory'" (the HTML report's
    table of status colours lacked the simulator's status)."""
    with ResultStore(tmp_path / "sim.sqlite") as store:
        store.create_run("sim", "zoo", "crucible-sim", {"mode": "inference"})
        store.record("sim", Result(name="zoo/a", target="crucible-sim", status=Status.FAIL_MEMORY, phase="compile",
                                   suite="zoo", error="SimulatorMemoryError: out of bounds in k_1",
                                   memory_kernels="k_1"))
        store.record("sim", Result(name="zoo/b", target="crucible-sim", status=Status.PASS, phase="compare",
                                   suite="zoo"))
    proc = cli("report", "sim.sqlite", "--html", "r.html")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text()
    assert f'fill="{Status.FAIL_MEMORY.color}"' in page and ">fail_memory</text>" in page
    assert "crucible run --entry zoo/a --target crucible-sim" in page


def _chromium() -> str | None:
    for name in (os.environ.get("CRUCIBLE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _hex(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def test_html_report_in_a_headless_browser(cli, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on this machine (CI installs Debian's chromium with apt-get; "
                    "set CRUCIBLE_CHROMIUM to a browser binary)")
    image_module = pytest.importorskip("PIL.Image", reason="Pillow (a torchvision dependency) reads the screenshot")
    db = tmp_path / "h.sqlite"
    ids = _fill_store(db)
    page = tmp_path / "report.html"
    proc = cli("report", f"{db}:{ids[-1]}", "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--screenshot={shot}",
                        f"--window-size={WINDOW[0]},{WINDOW[1]}", page.resolve().as_uri()],
                       capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "the browser wrote no screenshot"
    image = image_module.open(shot).convert("RGB")
    assert image.size == WINDOW

    def rows_with(color: str, tolerance: int = 12) -> list[int]:
        target = _hex(color)
        found = []
        for y in range(0, image.size[1], 2):
            row = [image.getpixel((x, y)) for x in range(0, 800, 2)]
            if sum(all(abs(a - b) <= tolerance for a, b in zip(px, target)) for px in row) >= 3:
                found.append(y)
        return found

    trend = rows_with(SERIES_COLORS[0])  # crucible-cpp's line in the trend plots
    bars = rows_with(Status.PASS.color)  # status bars (pass is green)
    hist = rows_with("#4c78a8")  # compile-time histogram
    assert trend and bars and hist, (len(trend), len(bars), len(hist))
    # the sections render in page order: trends above status bars above the histogram
    assert min(trend) < min(bars) < min(hist)
    # the rising pass rate: the line spans many rows (not a flat or missing line)
    assert max(trend) - min(trend) > 60
    # the failures table below the histogram holds text (dark pixels) in several rows
    below = [y for y in range(max(hist) + 40, image.size[1], 4)
             if sum(sum(image.getpixel((x, y))) < 200 for x in range(20, 1000, 3)) > 5]
    assert len(below) > 20, "no failures table below the plots"


def test_junit_xml(tmp_path: Path) -> None:
    db = tmp_path / "j.sqlite"
    ids = _fill_store(db, runs=1)
    with ResultStore(db) as store:
        run, results = store.run(ids[0]), store.results(ids[0])
    tree = junit_document(run, results)
    path = tmp_path / "junit.xml"
    tree.write(path, encoding="utf-8", xml_declaration=True)
    root = ET.parse(path).getroot()  # control characters in errors must not break the XML
    cases = root.findall(".//testcase")
    assert len(cases) == len(results) == 30
    by_name = {c.get("name"): c for c in cases}
    for r in results:
        case = by_name[r.name]
        assert case.get("classname") == f"crucible.crucible-cpp.{r.suite}"
        if r.status == Status.PASS:
            assert case.find("failure") is None and case.find("skipped") is None
        elif r.status == Status.EAGER_FAIL:
            assert case.find("skipped") is not None
        else:
            failure = case.find("failure")
            assert failure.get("type") == r.status
            assert "planted ?[Nmfailure?[Nm <addr> <&>" in failure.get("message")  # the signature
    assert int(root.get("tests")) == 30
    assert int(root.get("failures")) == sum(r.status in (Status.FAIL_ACCURACY, Status.FAIL_COMPILE)
                                            for r in results)
    assert {s.get("name") for s in root.findall("testsuite")} == {"opinfo on crucible-cpp", "timm on crucible-cpp",
                                                                  "zoo on crucible-cpp"}


def test_run_writes_junit_and_html(cli, tmp_path: Path) -> None:
    proc = cli("run", "--suite", "zoo", "--entry", "zoo/mlp", "zoo/item_branch", "--target", "eager", "-j", "1",
               "--no-capture", "--junit", "j.xml", "--html", "r.html", "--no-report")
    assert proc.returncode == 0, proc.stderr[-3000:]
    root = ET.parse(tmp_path / "j.xml").getroot()
    assert sorted(c.get("name") for c in root.iter("testcase")) == ["zoo/item_branch", "zoo/mlp"]
    assert "Crucible: zoo on eager" in (tmp_path / "r.html").read_text()
