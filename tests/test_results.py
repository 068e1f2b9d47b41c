"""Results are data, apart from the docs: benchmarks write results files (benchmarks/results/),
the Performance page shows the latest of each from them (docs/make_performance.py), and no user
page carries a dated measurement log or a main-job time of its own."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path[:0] = [str(REPO / "docs"), str(REPO / "benchmarks")]

import make_performance  # noqa: E402
import record  # noqa: E402

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
KEYS = {"schema", "benchmark", "date", "time", "machine", "commit", "dirty", "command"}
KEYS |= {"conditions", "figures"}


def user_pages() -> dict[Path, str]:
    """The docs' Markdown pages and the README, the Performance page without its generated
    part."""
    pages = {p: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]}
    performance = REPO / "docs" / "performance.md"
    head, _, rest = pages[performance].partition(make_performance.BEGIN)
    pages[performance] = head + rest.partition(make_performance.END)[2]
    return pages


def test_no_user_page_carries_a_dated_measurement():
    dated = [
        f"{path.relative_to(REPO)}:{k}: {line.strip()}"
        for path, text in user_pages().items()
        for k, line in enumerate(text.splitlines(), 1)
        if DATE.search(line)
    ]
    assert not dated, "dated lines belong in benchmarks/results/:\n" + "\n".join(dated)


def test_the_main_job_time_is_stated_only_by_the_performance_page():
    (line,) = make_performance.main_job(make_performance.load())
    seconds = float(re.search(r"\*\*([\d.]+) s\*\*", line).group(1))
    quoted = [  # the time to any rounding: 16.65 s as 16.65, 16.6 or 16.7 s
        f"{path.relative_to(REPO)}: {figure} s"
        for path, text in user_pages().items()
        for figure in re.findall(r"(\d+\.\d+) s\b", text)
        if abs(float(figure) - seconds) <= 0.051
    ]
    assert not quoted, f"the main job's time, quoted outside the Performance page: {quoted}"


def test_the_performance_page_is_rendered_from_the_results_files():
    check = [sys.executable, str(REPO / "docs" / "make_performance.py"), "--check"]
    proc = subprocess.run(check, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_page_shows_the_latest_record(tmp_path):
    for folder in ("latency", "suite"):
        (tmp_path / folder).mkdir()
        for path in (RESULTS / folder).glob("*.json"):
            (tmp_path / folder / path.name).write_text(path.read_text())
    newest = json.loads(sorted((tmp_path / "latency").glob("*.json"))[-1].read_text())
    newest["date"], newest["commit"] = "2999-01-01", "0123456789abcdef"
    newest["figures"]["commands"] = [
        {"command": "main", "baseline_s": 20.0, "new_s": 9.87, "ratio": 0.49, "target": 0.6}
    ]
    (tmp_path / "latency" / "2999-01-01T000000Z-0123456.json").write_text(json.dumps(newest))
    (line,) = make_performance.main_job(make_performance.load(tmp_path))
    assert "**9.87 s**" in line and "0123456" in line and "2999-01-01" in line


def test_the_page_shows_each_coverage_case_from_its_latest_run(tmp_path):
    (tmp_path / "coverage").mkdir()
    (older,) = (RESULTS / "coverage").glob("2026-12-07T103204Z-*.json")
    (tmp_path / "coverage" / older.name).write_text(older.read_text())
    newer = json.loads(older.read_text())
    newer["date"], newer["commit"] = "2999-01-01", "0123456789abcdef"
    newer["figures"]["cases"] = [
        {**c, "coverage": 0.5} for c in newer["figures"]["cases"] if c["case"] == "threshold"
    ]
    (tmp_path / "coverage" / "2999-01-01T000000Z-0123456.json").write_text(json.dumps(newer))
    lines = make_performance.coverage(make_performance.load(tmp_path))
    assert lines[0].startswith("- power_law, geometric_mean, curves: ") and "eb01285" in lines[0]
    assert lines[1].startswith("- threshold: ") and "0123456" in lines[1]
    threshold = [line for line in lines if line.startswith("| threshold |")]
    power_law = [line for line in lines if line.startswith("| power_law |")]
    assert len(threshold) == 3 and all("| 50.0% [" in line for line in threshold)
    assert len(power_law) == 12 and not any("| 50.0% [" in line for line in power_law)


def test_every_results_file_follows_the_schema():
    files = sorted(RESULTS.glob("*/*.json"))
    assert files
    for path in files:
        r = json.loads(path.read_text())
        assert r.keys() >= KEYS, f"{path.name}: lacks {KEYS - r.keys()}"
        assert r["schema"] == 1 and r["benchmark"] == path.parent.name, path
        assert r["date"] is None or re.fullmatch(r"\d{4}-\d\d-\d\d", r["date"]), path
        assert path.name.startswith(r["date"] or "undated-"), f"{path.name}: date {r['date']}"
        assert {"cpu", "cores", "gpu"} <= r["machine"].keys(), path
        assert isinstance(r["figures"], dict), path


def test_a_benchmark_run_records_its_machine_commit_and_command(tmp_path):
    path = record.write("throughput", {"cases": []}, str(tmp_path / "run.json"))
    r = json.loads(path.read_text())
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert r["commit"] == head and r["dirty"] in (True, False)
    assert r["machine"]["cores"] == os.cpu_count() and r["machine"]["cpu"]
    assert r["command"].startswith("python ") and re.fullmatch(r"\d{4}-\d\d-\d\d", r["date"])
    assert r["figures"] == {"cases": []} and r["benchmark"] == "throughput"


def test_a_commit_named_by_sdyn_commit_wins_over_the_checkout(monkeypatch):
    # A GPU machine gets the working tree with a .git that need not be that tree's.
    monkeypatch.setenv("SDYN_COMMIT", "20a1017")
    assert record.commit() == ("20a1017", None)


def test_a_run_records_the_commit_it_started_on(tmp_path, monkeypatch):
    # An hour's sweep outlives the commits that land beside it: it ran the code it started on.
    monkeypatch.setattr(record, "COMMIT_AT_START", ("0123456", False))
    monkeypatch.setenv("SDYN_COMMIT", "20a1017")  # read at the start, not now
    r = json.loads(record.write("throughput", {"cases": []}, str(tmp_path / "r.json")).read_text())
    assert (r["commit"], r["dirty"]) == ("0123456", False)


def test_timed_records_a_test_run_from_pytests_summary(tmp_path):
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n\n"
        "@pytest.mark.skip\ndef test_three():\n    pass\n"
    )
    out = tmp_path / "suite.json"
    command = [sys.executable, str(REPO / "benchmarks" / "timed.py"), "suite", "--out", str(out)]
    command += ["--", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_a.py"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    f = json.loads(out.read_text())["figures"]
    assert f["tests"] == 3 and f["outcomes"] == "2 passed, 1 skipped" and f["processes"] == 1
    assert 0 < f["pytest_s"] < 60 and f["tier"] == "full" and f["ci_run_s"] is None


@pytest.mark.slow  # 20 s: bootstraps of up to 40 curves
def test_coverage_records_sdyns_interval_beside_the_one_it_does_not_take(tmp_path):
    import coverage

    out = str(tmp_path / "c.json")
    with pytest.raises(SystemExit) as bad:
        coverage.main(["--trials", "5", "--out", out])
    assert bad.value.code == 2 and not (tmp_path / "c.json").exists()
    assert coverage.main(["--trials", "30", "--only", "curves", "--out", out]) == 0
    f = json.loads((tmp_path / "c.json").read_text())["figures"]
    rows = {(c["replicates"], c["noise"]): c for c in f["cases"]}
    assert len(rows) == 16 and f["trials"] == 30
    assert {(c["method"], c["beside"]["method"]) for c in rows.values()} == {
        ("clustered t", "bootstrap of curves")
    }
    # Five curves resampled cannot reach past themselves: the bootstrap is narrower than the
    # t interval on the same data, whatever the curves' spread.
    for noise in coverage.CASES["curves"].noises:
        assert rows[(5, noise)]["beside"]["width_ratio"] < rows[(5, noise)]["width_ratio"]
    for c in rows.values():
        low, high = c["coverage_ci"]
        assert low <= c["coverage"] <= high and 0.7 < c["width_ratio"] < 1.6


@pytest.mark.slow
def test_timed_records_a_sweep_with_its_training_time(tmp_path):
    out = tmp_path / "sweep.json"
    command = [sys.executable, str(REPO / "benchmarks" / "timed.py"), "sweep", "--out", str(out)]
    command += ["--", sys.executable, "-m", "sdyn.sweep", "+grid=width", "grid.n=[8]"]
    command += ["grid.widths=[2,4]", "grid.seeds=1", "experiment.steps=50", "sweep.progress=false"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (s,) = json.loads(out.read_text())["figures"]["sweeps"]
    assert s["runs"] == 2 and 0 < s["training_s"] < s["end_to_end_s"] and s["exit_status"] == 0


def test_bundle_times_splits_a_log_by_driver_and_times_each_workers_first_bundle_apart(tmp_path):
    import bundle_times

    def event(time, event, driver, **fields):
        return json.dumps({"time": time, "event": event, "sweep": "s", "driver": driver} | fields)

    def bundle(handed, done, driver, k, device, worker):
        start = event(handed, "bundle_started", driver, bundle=k, runs=[], device=device, attempt=0)
        return [start, event(done, "bundle_finished", driver, bundle=k, runs=[], worker=worker)]

    lines = [
        event(0.0, "sweep_started", "gpu"),
        *bundle(1.0, 21.0, "gpu", 0, "cuda", 7),
        *bundle(21.0, 23.0, "gpu", 1, "cuda", 7),
        # All handed at once: worker 2 trains bundle 2 only once bundle 1 is done (at 34).
        *bundle(30.0, 35.0, "cpu", 0, "cpu", 1),
        *bundle(30.0, 34.0, "cpu", 1, "cpu", 2),
        *bundle(30.0, 36.5, "cpu", 2, "cpu", 2),
    ]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    gpu, cpu = bundle_times.drivers(tmp_path / "events.jsonl")
    assert (gpu["device"], gpu["bundles"], gpu["workers"]) == ("cuda", 2, 1)
    assert (gpu["first_s"], gpu["rest_s"], gpu["last_done_s"]) == (20.0, 2.0, 22.0)
    assert (cpu["workers"], cpu["first_s"], cpu["rest_s"], cpu["last_done_s"]) == (2, 9.0, 2.5, 6.5)
