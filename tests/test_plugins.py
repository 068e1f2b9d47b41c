"""Experiment plugins (sdyn.api, sdyn.plugins): found by entry point or module path, and every
way a plugin can be broken is one line on stderr, exit status 2, and nothing written."""

import dataclasses
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from sdyn import plugins
from sdyn.analysis.load import load_sweep
from sdyn.analysis.report import file_stem
from sdyn.api import BundleResult, Experiment, PluginError, Run, blamed
from sdyn.experiments import ntk
from sdyn.testing import run_sweep
from sdyn.tracking.table import unrecordable

# A working plugin in one file, as a user writes it; each broken case edits one line of it.
PLUGIN = """
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sdyn.analysis.kinds import PowerLaw
from sdyn.api import BundleResult, Experiment


@dataclass
class Config:
    name: str = "toy"
    k: float = 1.0  # the slope


@dataclass
class Grid:
    name: str = "ks"
    k: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    seeds: int = 2

    def points(self):
        return [{"k": k} for k in self.k]


def train(runs, device=None):
    summaries = [{"status": "converged", "y": r.experiment.k * (1 + 0.01 * r.seed)} for r in runs]
    return BundleResult(summaries, pd.DataFrame({"run": [], "step": []}))


CLAIM = PowerLaw(id="linear", statement="y ~ k", source="a test", quantity="y",
                 axis="experiment.k", theory=1.0, direction="==", tolerance=0.05)
EXPERIMENT = Experiment(name="toy", config=Config, grids={"ks": Grid}, train=train,
                        claims=(CLAIM,))
"""


# Makes train() raise for the runs at k = $TOY_RAISE_K: the same source (so the same runs)
# fails or not.
RAISE_AT_K = """def train(runs, device=None):
    import os

    if any(str(r.experiment.k) == os.environ.get("TOY_RAISE_K", "") + ".0" for r in runs):
        raise RuntimeError("k is 8")
"""


# A plugin's own kind (sdyn's power law under another name) whose METHOD raises.
BROKEN_KIND = """from dataclasses import dataclass as kind
from typing import ClassVar

from sdyn.analysis.kinds import PowerLaw as SdynPowerLaw


@kind(frozen=True, kw_only=True)
class PowerLaw(SdynPowerLaw):
    kind: ClassVar[str] = "broken_law"

    def METHOD(self, *args, **kwargs):
        raise RuntimeError("METHOD is broken")
"""


def _broken_kind(method: str) -> tuple[str, int]:
    """The plugin with that kind, and the line number of its raise."""
    source = PLUGIN.replace(
        "from sdyn.analysis.kinds import PowerLaw", BROKEN_KIND.replace("METHOD", method)
    )
    return source, source.splitlines().index(
        f'        raise RuntimeError("{method} is broken")'
    ) + 1


def _sweep(tmp_path, source: str, *overrides: str, env=None) -> subprocess.CompletedProcess:
    (tmp_path / "toy.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", "experiment=toy", "+grid=ks", *overrides],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _refused(proc: subprocess.CompletedProcess, needle: str, tmp_path) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("sdyn: error:") and needle in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["toy.py"]


BROKEN = [
    # A missing required object: no EXPERIMENT, or an Experiment without claims.
    ("EXPERIMENT = Experiment(", "OTHER = Experiment(", "module toy has no EXPERIMENT"),
    ("                        claims=(CLAIM,))", "                        )",
     "importing toy failed: TypeError: Experiment.__init__() missing 1 required"),
    # A grid with a key its config lacks.
    ('return [{"k": k} for k in self.k]', 'return [{"kk": k} for k in self.k]',
     "grid 'ks' sets kk, which config Config lacks"),
    # An error inside the plugin's module: its name and the exception's last line.
    ("import pandas as pd", "import pandas as pd\n1 / 0",
     "importing toy failed: ZeroDivisionError: division by zero"),
    ("claims=(CLAIM,))", "claims=(CLAIM, 'y ~ k'))", "claims holds a str, not a Claim"),
    # A claim without a field its kind needs: one line at import, not a failure in the analysis.
    ("CLAIM = PowerLaw(", "from sdyn.analysis.kinds import ColumnRatio\nCLAIM = ColumnRatio(",
     "importing toy failed: ValueError: claim 'linear' (column_ratio): give reference"),
    ("theory=1.0", 'theory="1.0"',
     "importing toy failed: ValueError: claim 'linear' (power_law): theory must be a number, "
     "got '1.0'"),
    # An experiment function that raises, or a bundle key that cannot group runs: one line
    # naming the function (and the plugin's line), before anything is written.
    ("claims=(CLAIM,))", "claims=(CLAIM,), validate=lambda run: run.experiment.k + 'x')",
     "experiment 'toy': validate: TypeError: unsupported operand type(s) for +: 'float' and "
     "'str' at "),
    # validate refusing the last grid point alone: every point is checked, not the first few.
    ("claims=(CLAIM,))", "claims=(CLAIM,), validate=lambda run: run.experiment.k < 8 or int('k8'))",
     "invalid literal for int() with base 10: 'k8'"),
    ("claims=(CLAIM,))", "claims=(CLAIM,), shape_key=lambda run: [run.experiment.k])",
     "experiment 'toy': shape_key returned a list, which is not hashable"),
    ("claims=(CLAIM,))", "claims=(CLAIM,), footprint=lambda run: None)",
     "experiment 'toy': footprint returned a NoneType: give the bytes"),
    ("claims=(CLAIM,))", "claims=(CLAIM,), footprint=lambda run: float('nan'))",
     "experiment 'toy': footprint returned nan: give the bytes of the run's largest tensor (> 0)"),
    ("claims=(CLAIM,))", "claims=(CLAIM,), gpu_footprint='1 GiB')",
     "experiment 'toy': gpu_footprint must be a number of bytes (an int > 0), got '1 GiB'"),
    ('return [{"k": k} for k in self.k]', 'return ({"k": k} for k in self.k)',
     "grid 'ks': points() must return a list of dicts"),
    ("    k: float = 1.0  # the slope\n",
     "    k: float = 1.0\n\n    def __post_init__(self):\n        assert self.k < 5, 'k too big'\n",
     "experiment 'toy': config Config: AssertionError: k too big at "),
    # Names that name files and MLflow keys (a traceback after training, every rerun too).
    ('CLAIM = PowerLaw(id="linear"', 'CLAIM = PowerLaw(id="linear (Thm 2)"',
     "importing toy failed: ValueError: claim 'linear (Thm 2)' (power_law): an id names the "
     "claim's plot and MLflow tag"),
    ("claims=(CLAIM,))", "claims=(CLAIM,), scatter_plot=('samples', 'x'))",
     "experiment 'toy': scatter_plot must be (table, x, y, hue) or (table, x, y, hue, marked)"),
    # A claim or a figure reading a config key the config lacks: found before the sweep is
    # planned.
    ("claims=(CLAIM,))",
     "claims=(CLAIM,), figures=(__import__('sdyn.api').api.Figure('f', 'F', (), 'experiment.j'),))",
     "figure 'f' reads experiment.j, which neither config Config nor a data set has"),
    ('axis="experiment.k"', 'axis="experiment.kk"',
     "claim 'linear' reads experiment.kk, which neither config Config nor a data set has"),
    # A reference line at a column of words (a TypeError in the report, after training), or
    # neither a column nor a number.
    ('axis="experiment.k"', 'references=(("experiment.name", "toy"),), axis="experiment.k"',
     "claim 'linear' draws experiment.name as a reference line, but it holds 'toy': give a "
     "column of numbers"),
    ('axis="experiment.k"', 'references=((None, "none"),), axis="experiment.k"',
     "claim 'linear' (power_law): a reference is (column, label) or (number, label), got "
     "(None, 'none')"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "broken", "needle"), BROKEN, ids=[c[2][:40] for c in BROKEN])
def test_a_broken_plugin_is_one_line_exit_2_nothing_written(tmp_path, line, broken, needle):
    assert line in PLUGIN
    proc = _sweep(tmp_path, PLUGIN.replace(line, broken))
    _refused(proc, needle, tmp_path)


def test_a_plugin_kind_that_raises_in_the_plan_is_one_line_naming_its_line(tmp_path):
    source, raised = _broken_kind("limits")
    proc = _sweep(tmp_path, source, "--plan")
    _refused(proc, "claim 'linear' (broken_law): RuntimeError: limits is broken at ", tmp_path)
    assert proc.stderr.rstrip().endswith(f"{tmp_path / 'toy.py'}:{raised}, in limits")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["measure", "draw"])
def test_a_plugin_kind_that_raises_after_training_keeps_the_runs_and_says_how_to_report(
    tmp_path, method
):
    source, raised = _broken_kind(method)
    proc = _sweep(tmp_path, source, "sweep.progress=false")
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        f"sdyn: error: claim 'linear' (broken_law): RuntimeError: {method} is broken at "
        f"{tmp_path / 'toy.py'}:{raised}, in {method}; the sweep's runs are recorded"
    )
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    runs = load_sweep("toy-ks-none", uri)
    assert len(runs) == 8 and (runs["status"] == "converged").all()
    parent = MlflowClient(uri).get_run(runs.attrs["parent_run_id"]).info
    assert parent.status == "FINISHED"  # closed, not left RUNNING for a lease to lapse
    # Once mended, the command the line gives writes the report from the recorded runs.
    (tmp_path / "toy.py").write_text(textwrap.dedent(_broken_kind("unused")[0]))
    command = line.split("once the kind is mended, ")[-1].removesuffix(" writes it")
    assert command.startswith("python -m sdyn.report --sweep toy-ks-none ")
    report = subprocess.run(
        [sys.executable, *command.split()[1:]], cwd=tmp_path, capture_output=True, text=True
    )
    assert report.returncode == 0, report.stderr[-2000:]
    assert (tmp_path / "outputs" / "toy-ks-none" / "linear.png").is_file()


PLAN_BROKEN = [
    ("claims=(CLAIM,))", "claims=(CLAIM,), steps_forecast=lambda runs: [1] * (len(runs) - 1))",
     "experiment 'toy': steps_forecast returned 7 steps for 8 runs"),
    ("claims=(CLAIM,))", "claims=(CLAIM,), gpu_footprint=1, step_cost=lambda runs: 1e9)",
     "experiment 'toy': step_cost returned 1000000000.0: give (FLOP, bytes moved) per step"),
    ("def train(runs, device=None):\n", "def train(runs, device=None):\n    raise OSError('no')\n",
     "experiment 'toy': train, timed by a probe: OSError: no at "),
]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "broken", "needle"), PLAN_BROKEN, ids=["forecast", "cost", "probe"]
)
def test_a_plugin_function_that_breaks_the_plan_is_one_line(tmp_path, line, broken, needle):
    # Each was a traceback from --plan (the sweep itself never calls them, or fails its runs).
    assert line in PLUGIN
    _refused(_sweep(tmp_path, PLUGIN.replace(line, broken), "--plan"), needle, tmp_path)


def test_two_experiments_registering_one_name_are_refused(tmp_path):
    # A second distribution (an installed .dist-info) that registers "ntk" too.
    info = tmp_path / "site" / "rival-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rival\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[sdyn.experiments]\nntk = rival_ntk:EXPERIMENT\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", "+grid=width"],
        cwd=tmp_path / "site",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "sdyn: error: two experiments register the name 'ntk': "
        "rival_ntk:EXPERIMENT and sdyn.experiments.ntk:EXPERIMENT; uninstall one"
    ]
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == ["rival-1.0.dist-info"]


FIGURE = "__import__('sdyn.api').api.Figure('f', 'F', ({}), 'experiment.k')"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "broken", "read"),
    [
        ('quantity="y"', 'quantity="z"', "claim 'linear' reads 'z'"),
        ('axis="experiment.k"', 'by="w", axis="experiment.k"', "claim 'linear' reads 'w'"),
        (
            'axis="experiment.k"',
            'describe=(__import__("sdyn.api").api.Describe(("y",), "w"),), axis="experiment.k"',
            "claim 'linear' reads 'w'",
        ),
        (
            'axis="experiment.k"',
            'references=(("w", "a baseline"),), axis="experiment.k"',
            "claim 'linear' reads 'w'",
        ),
        # A figure whose panel draws a curve train never records was left out of the report.
        (
            "claims=(CLAIM,))",
            "claims=(CLAIM,), figures=("
            + FIGURE.format("__import__('sdyn.api').api.Panel('w', 'W'),")
            + ",))",
            "figure 'f' reads 'w'",
        ),
    ],
    ids=["quantity", "by", "describe", "reference", "panel"],
)
def test_a_claim_on_a_column_train_never_returns_stops_at_the_first_bundle(
    tmp_path, line, broken, read
):
    # Found on the first bundle's result, before it is recorded: no run, no report.
    proc = _sweep(tmp_path, PLUGIN.replace(line, broken), "sweep.progress=false")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert lines[-1] == (
        f"sdyn: error: experiment 'toy': {read}, which train() does not return (it returns "
        "status, y)"
    )
    (log,) = (tmp_path / "outputs").rglob("*.*")  # the driver's event log alone, no report
    assert log.name == "events.jsonl" and '"recorded"' not in log.read_text()
    last = json.loads(log.read_text().splitlines()[-1])  # it ended after the first bundle
    assert (last["event"], last["exit"]) == ("sweep_finished", 2)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("sdyn")
    assert client.search_runs([experiment.experiment_id]) == []  # the parent is deleted


@pytest.mark.slow
def test_a_module_in_the_working_directory_runs_as_an_experiment(tmp_path):
    proc = _sweep(tmp_path, PLUGIN, "sweep.progress=false")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("| linear ")]
    assert "consistent" in row and "meets the prediction 1 +/- 0.05" in row
    assert (tmp_path / "outputs" / "toy-ks-none" / "linear.png").is_file()
    # Its report, rebuilt where the module is not importable, says which sweep needs what.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    report = subprocess.run(
        [sys.executable, "-m", "sdyn.report", "--sweep", "toy-ks-none", "--tracking-uri", uri],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 2 and list(elsewhere.iterdir()) == []
    assert report.stderr.startswith("sdyn: error: sweep 'toy-ks-none': unknown experiment 'toy';")
    assert "my_theorem.py in the working directory" in report.stderr


def test_the_plan_of_a_plugin_with_no_step_budget_times_its_runs_whole(tmp_path):
    """The toy config has no ``steps``: the cost model times each run whole, as one step."""
    proc = _sweep(tmp_path, PLUGIN, "--plan")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "runs: 8 = 4 cells x 2 seeds" in proc.stdout and "8 to train" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["toy.py"]


def test_the_plan_times_whole_the_runs_of_a_config_that_refuses_the_probes_step_counts(tmp_path):
    # warmup < steps holds at the planned 10 steps, not at the probe's: --plan blamed train.
    stepped = PLUGIN.replace(
        "    k: float = 1.0  # the slope\n",
        "    k: float = 1.0\n    steps: int = 10\n    warmup: int = 5\n\n"
        "    def __post_init__(self):\n"
        "        if self.warmup >= self.steps:\n"
        "            raise ValueError(f'experiment.warmup must be < steps, got {self.warmup}')\n",
    )
    proc = _sweep(tmp_path, stepped, "--plan")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "8 to train" in proc.stdout


def test_sdyns_own_experiments_are_entry_points_like_any_plugin():
    assert {"ntk", "score", "attention_regression", "implicit_bias"} <= set(plugins.names())
    assert plugins.get("ntk") is ntk.EXPERIMENT
    with pytest.raises(PluginError, match="unknown experiment 'nkt'; installed: "):
        plugins.get("nkt")


def test_the_defaults_of_an_experiment_work():
    """Only the required objects: one bundle per config, on the CPU, no data set, no figures.
    A claim of no registered kind is refused: since issue 41 a claim's kind is its class (a
    subclass that sets no ``kind`` of its own is none), where it was an unknown kind string."""
    lean = Experiment("lean", ntk.CONFIG, ntk.GRIDS, ntk.train, ntk.CLAIMS[:1])
    cfg = ntk.EXPERIMENT.config()
    assert lean.shape_key(Run(cfg, None, 0)) == lean.bundle_key(Run(cfg, None, 1))
    assert lean.shape_key(Run(cfg, None, 0)) != lean.shape_key(Run(ntk.CONFIG(n=8), None, 0))
    assert lean.default_data == "none" and lean.gpu_footprint is None and lean.figures == ()

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Slope(type(ntk.CLAIMS[0])):  # a subclass that registers no kind of its own
        pass

    slope = Slope(**{f.name: getattr(ntk.CLAIMS[0], f.name) for f in dataclasses.fields(Slope)})
    with pytest.raises(PluginError, match=f"claim '{slope.id}' is a Slope, which is no claim kind"):
        dataclasses.replace(lean, claims=(slope,))


def test_a_claims_grids_must_be_the_experiments():
    """A typo in ``Claim.grids`` is refused at construction: the claim was measured by no
    sweep and read "not measured" in every report. A string where a tuple belongs too (it
    named each letter a grid)."""
    claim = ntk.CLAIMS[0]
    with pytest.raises(PluginError, match="grid 'widht', which the experiment lacks: its grids"):
        dataclasses.replace(ntk.EXPERIMENT, claims=(dataclasses.replace(claim, grids=("widht",)),))
    with pytest.raises(ValueError, match=r"grids must be a tuple of grid names, got 'width'"):
        dataclasses.replace(claim, grids="width")


def test_a_plugins_own_yaml_joins_hydras_search_path(tmp_path, monkeypatch):
    # conf_dir: YAML options of the plugin's own, next to the groups built from its dataclasses;
    # in a folder whose name Hydra's override grammar would split (a comma), quoted.
    tmp_path = tmp_path / "my plugin, v2's"
    (tmp_path / "conf" / "grid").mkdir(parents=True)
    (tmp_path / "conf" / "grid" / "two_ks.yaml").write_text(
        "defaults:\n  - ks\n  - _self_\nk: [2.0, 3.0]\n"
    )
    source = (
        PLUGIN.replace('name: str = "toy"', 'name: str = "toy_yaml"')
        .replace(
            "tolerance=0.05)",
            'tolerance=0.05, grids=("two_ks",))',  # a YAML grid, named by a claim
        )
        .replace(
            "claims=(CLAIM,))",
            "claims=(CLAIM,), conf_dir=__import__('pathlib').Path(__file__).parent / 'conf')",
        )
    )
    (tmp_path / "toy_yaml.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from sdyn import compose

    cfg = compose.load(["experiment=toy_yaml", "+grid=two_ks"])
    assert list(cfg.grid.k) == [2.0, 3.0] and cfg.grid.seeds == 2 and cfg.data.name == "none"
    assert list(compose.load(["experiment=toy_yaml", "+grid=ks"]).grid.k) == [1.0, 2.0, 4.0, 8.0]


def test_a_runs_key_holds_the_experiments_own_version_else_its_distributions_else_its_source(
    tmp_path,
):
    site = tmp_path / "site"
    (site / "toy_dist-0.1.0.dist-info").mkdir(parents=True)
    (site / "toy_dist-0.1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy_dist\nVersion: 0.1.0\n"
    )
    (site / "toy_dist-0.1.0.dist-info" / "entry_points.txt").write_text(
        "[sdyn.experiments]\ntoy_dist = toy_dist:EXPERIMENT\n"
    )
    (site / "toy_dist.py").write_text(textwrap.dedent(PLUGIN.replace('"toy"', '"toy_dist"')))
    (tmp_path / "toy.py").write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "toy_own.py").write_text(
        textwrap.dedent(PLUGIN.replace("claims=(CLAIM,))", "claims=(CLAIM,), version='2.0')"))
    )
    names = ["toy_dist", "toy", "toy_own", "ntk"]
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from sdyn import plugins\nfor n in {names}: print(plugins.get(n).version)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    source = hashlib.sha256((tmp_path / "toy.py").read_bytes()).hexdigest()[:12]
    own = str(ntk.EXPERIMENT.version)
    assert proc.stdout.splitlines() == ["0.1.0", f"source {source}", "2.0", own]


def _lines(proc: subprocess.CompletedProcess) -> tuple[str, list[str]]:
    """The sweep's name and its lines that say what it trains."""
    assert proc.returncode == 0, proc.stderr[-2000:]
    (start,) = [line for line in proc.stdout.splitlines() if line.startswith("sdyn: sweep ")]
    said = [line for line in proc.stdout.splitlines() if "other code" in line]
    return start.split()[2].rstrip(":"), [start.split(" (MLflow")[0], *said]


@pytest.mark.slow
def test_a_plugin_whose_train_changed_trains_again_and_one_whose_code_did_not_trains_nothing(
    tmp_path,
):
    name, said = _lines(_sweep(tmp_path, PLUGIN, "sweep.progress=false"))
    assert said == [f"sdyn: sweep {name}: 8 runs, 0 already recorded, 8 to train"]
    assert _lines(_sweep(tmp_path, PLUGIN, "sweep.progress=false")) == (
        name,
        [f"sdyn: sweep {name}: 8 runs, 8 already recorded, 0 to train"],
    )
    old = hashlib.sha256((tmp_path / "toy.py").read_bytes()).hexdigest()[:12]
    changed = PLUGIN.replace('"y": r.experiment.k *', '"y": 3 * r.experiment.k *')
    new_name, said = _lines(_sweep(tmp_path, changed, "sweep.progress=false"))
    new = hashlib.sha256((tmp_path / "toy.py").read_bytes()).hexdigest()[:12]
    assert new_name.startswith(f"{name}-")  # another plan: the name takes its digest
    assert said == [
        f"sdyn: sweep {new_name}: 8 runs, 0 already recorded, 8 to train",
        f"sdyn: 8 runs recorded by other code of experiment toy (version source {old} -> "
        f"source {new}) are not reused; they stay in the store",
    ]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    runs, before = load_sweep(new_name, uri), load_sweep(name, uri)
    # The analysis reads the new code's runs only; the old code's stay in the store.
    assert len(runs) == 8 and set(runs["y"]) == {3 * y for y in before["y"]}
    assert not set(runs["config_hash"]) & set(before["config_hash"])
    assert _lines(_sweep(tmp_path, changed, "sweep.progress=false"))[1] == [
        f"sdyn: sweep {new_name}: 8 runs, 8 already recorded, 0 to train"
    ]


@pytest.mark.slow
def test_sweep_retrain_trains_every_run_again_and_its_failures_supersede_results(tmp_path):
    status = 'os.environ.get("TOY_STATUS", "converged")'  # "ok": a broken plugin
    timed = PLUGIN.replace('"status": "converged",', f'"status": {status}, "t": time.time(),')
    timed = timed.replace("import pandas as pd", "import time\n\nimport pandas as pd")
    timed = timed.replace("def train(runs, device=None):\n", RAISE_AT_K)
    name, said = _lines(_sweep(tmp_path, timed, "sweep.progress=false"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    first = load_sweep(name, uri)
    _, said = _lines(_sweep(tmp_path, timed, "sweep.progress=false", "sweep.retrain=true"))
    assert said == [f"sdyn: sweep {name}: 8 runs, 0 already recorded, 8 to train"]
    again = load_sweep(name, uri)  # the same sweep: a run's latest record is read
    assert len(again) == 8 and again["t"].min() > first["t"].max()
    assert _lines(_sweep(tmp_path, timed, "sweep.progress=false"))[1] == [
        f"sdyn: sweep {name}: 8 runs, 8 already recorded, 0 to train"
    ]
    # A retrain whose runs at k = 8 now raise (the same code, so the same runs): their
    # failures supersede the results they were to replace, in the analysis and on resume.
    env = {**os.environ, "TOY_RAISE_K": "8"}
    failed = _sweep(tmp_path, timed, "sweep.progress=false", "sweep.retrain=true", env=env)
    assert failed.returncode == 1, failed.stderr[-2000:]
    last = load_sweep(name, uri)
    assert sorted(last.loc[last["status"] == "failed", "experiment.k"]) == [8.0, 8.0]
    assert last.loc[last["status"] != "failed", "t"].min() > again["t"].max()
    # Run again, it trains nothing and still holds two failed runs: it says so, exits 1 and
    # leaves its parent FAILED (it read "0 failed", exit 0, FINISHED).
    rerun = _sweep(tmp_path, timed, "sweep.progress=false")
    assert rerun.returncode == 1, rerun.stderr[-2000:]
    assert "sdyn: 2 runs of the sweep failed when first trained (sweep.retry_failed" in rerun.stdout
    parent = MlflowClient(uri).get_run(last.attrs["parent_run_id"])
    assert (parent.info.status, parent.data.tags["sdyn.failed_runs"]) == ("FAILED", "2")
    resumed = _sweep(tmp_path, timed, "sweep.progress=false", "sweep.retry_failed=true")
    assert f"sdyn: sweep {name}: 8 runs, 6 already recorded, 2 to train" in resumed.stdout
    assert (load_sweep(name, uri)["status"] == "converged").all()
    # A retrain whose plugin broke (an unknown status) is refused: the sweep it reopened was
    # deleted, its recorded runs lost to the report and to the next resume.
    env = {**os.environ, "TOY_STATUS": "ok"}
    broken = _sweep(tmp_path, timed, "sweep.progress=false", "sweep.retrain=true", env=env)
    assert broken.returncode == 2, broken.stderr[-2000:]
    assert "status 'ok' for run 0" in broken.stderr
    kept = load_sweep(name, uri)
    assert len(kept) == 8 and (kept["status"] == "converged").all()
    parent = MlflowClient(uri).get_run(kept.attrs["parent_run_id"]).info
    assert (parent.status, parent.lifecycle_stage) == ("FINISHED", "active")


@pytest.mark.parametrize("summary", [{"status": "ok"}, {"y": 1.0}], ids=["unknown", "missing"])
def test_a_run_status_sdyn_does_not_count_is_a_plugin_error(summary):
    # Any status but these would drop the run from every claim without a word.
    lean = Experiment("lean", ntk.CONFIG, ntk.GRIDS, ntk.train, ntk.CLAIMS[:1])
    good = {"status": "budget_exhausted", **READ}
    lean.check_result(BundleResult([good, {**good, "status": "diverged"}], None), 2, "width")
    with pytest.raises(PluginError, match=r"returned status .* for run 1 of the bundle; give one"):
        lean.check_result(BundleResult([good, {**READ, **summary}], None), 2, "width")


# What the claim reads of a run's summary (its status, sdyn's own column, aside).
READ = {c: 1.0 for c in ntk.CLAIMS[0].columns() - {"status"} if not c.startswith("experiment.")}
AMISS = [
    ({"status": "converged"}, "a dict, not a BundleResult"),
    (BundleResult([{"status": "converged"}], None), "1 summaries for 2 runs: give one dict"),
    (BundleResult([1.0, 2.0], None), "2 summaries for 2 runs: give one dict per run"),
    (BundleResult([{"status": "converged"}] * 2, pd.DataFrame({"run": [0]})),
     "curves without a run or step column"),
    (BundleResult([{"status": "converged"}] * 2, pd.DataFrame({"run": [0, 5], "step": [1, 1]})),
     "curves whose run column is not a position in the bundle (0..1)"),
    (BundleResult([{"status": "converged"}] * 2, None, {"samples": [1, 2]}),
     "samples as a list, not a DataFrame"),
    (BundleResult([{"status": "converged", **READ, "ntk_margin": "1.0"}] * 2, None),
     "ntk_margin as a str, which claim 'width_threshold' reads: give a real number"),
]  # fmt: skip


@pytest.mark.parametrize(("result", "needle"), AMISS, ids=[n[:30] for _, n in AMISS])
def test_a_bundle_result_amiss_is_one_line_naming_what(result, needle):
    # Each was a traceback from recording (a KeyError, a zip() too short), or a quantity
    # silently dropped (a string).
    lean = Experiment("lean", ntk.CONFIG, ntk.GRIDS, ntk.train, ntk.CLAIMS[:1])
    with pytest.raises(
        PluginError, match=re.escape(f"experiment 'lean': train() returned {needle}")
    ):
        lean.check_result(result, 2, "width")
    # numpy's numbers are real numbers, recorded as such (np.float32 was dropped)
    read = {key: np.float32(value) for key, value in READ.items()}
    lean.check_result(BundleResult([{"status": "converged", **read}] * 2, None), 2, "width")


def _raises(exc: Exception, *args):
    raise exc


def test_blamed_names_the_plugins_line_and_leaves_sdyns_own_errors_traced():
    at = r"^f: KeyError: 'k' at .*test_plugins.py:\d+, in _raises$"
    with pytest.raises(PluginError, match=at), blamed("f", _raises):
        _raises(KeyError("k"))
    # A partial has no module or source line: still one line, without the place.
    partial = functools.partial(_raises, KeyError("k"))
    with pytest.raises(PluginError, match=r"^f: KeyError: 'k'$"), blamed("f", partial):
        partial()
    # What the function raises by contract passes; sdyn's own code is traced in full.
    with pytest.raises(ValueError, match="^refused$"), blamed("f", _raises, (ValueError,)):
        _raises(ValueError("refused"))
    with pytest.raises(KeyError), blamed("f", ntk.train):
        _raises(KeyError("k"))


def test_a_table_without_what_its_scatter_plot_draws_is_one_line():
    # A KeyError from drawing the report, after every run was recorded.
    lean = Experiment("lean", ntk.CONFIG, ntk.GRIDS, ntk.train, ntk.CLAIMS[:1])
    lean = dataclasses.replace(lean, scatter_plot=("samples", "x", "y", "hue"))
    samples = pd.DataFrame({"run": [0, 1], "x": [0.0, 1.0], "y": [1.0, 0.0]})
    result = BundleResult([{"status": "converged", **READ}] * 2, None, {"samples": samples})
    with pytest.raises(PluginError, match="returned table samples without hue, which scatter"):
        lean.check_result(result, 2, "width")
    lean.check_result(result, 2, "width", whole=False)  # later bundles: no column is missing


@pytest.mark.slow
def test_a_later_bundle_amiss_fails_its_runs_and_keeps_the_others(tmp_path):
    # The first bundle is checked whole and a broken plugin records nothing; a later one
    # that returns one summary too few failed the driver with a traceback, its sweep left
    # RUNNING and the runs in flight lost.
    amiss = PLUGIN.replace(
        "    return BundleResult(summaries,",
        "    if runs[0].experiment.k == 8.0:  # late, and amiss\n"
        "        __import__('time').sleep(3)\n"
        "        summaries = summaries[:1]\n"
        "    return BundleResult(summaries,",
    )
    proc = _sweep(tmp_path, amiss, "sweep.progress=false")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert (
        "sdyn: a run failed: sdyn.api.PluginError: experiment 'toy': train() returned 1 "
        "summaries for 2 runs" in proc.stdout
    )
    runs = load_sweep("toy-ks-none", f"sqlite:///{tmp_path}/mlflow.db")
    assert sorted(runs.loc[runs["status"] == "failed", "experiment.k"]) == [8.0, 8.0]
    assert (runs.loc[runs["experiment.k"] != 8.0, "status"] == "converged").all()
    parent = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").get_run(runs.attrs["parent_run_id"])
    assert parent.info.status == "FAILED"  # closed: runs failed


def test_run_sweep_fails_the_test_with_the_sweeps_error(tmp_path):
    # sdyn.testing.run_sweep on bad input: an AssertionError quoting sdyn's one-line error.
    with pytest.raises(AssertionError, match=r"exited 2:\nsdyn: error: unknown key grid.sedes"):
        run_sweep(["+grid=width", "grid.sedes=2"], tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("summary", "curves", "tables", "needle"),
    [
        ({"seed": 7.0}, None, {}, "a summary key 'seed', a column of sdyn's run table"),
        ({"curves": 1.0}, None, {}, "a summary key 'curves', a column of sdyn's run table"),
        ({"experiment.k": 1.0}, None, {}, "a summary key 'experiment.k', a column of sdyn's"),
        ({"q(n)": 1.5}, None, {}, "'q(n)' as a summary key or curve, which MLflow refuses"),
        ({}, pd.DataFrame({"run": [0], "step": [1], "acc@1": [0.5]}), {}, "'acc@1' as a"),
        ({"../x": 1.0}, None, {}, "'../x' as a summary key or curve, which MLflow refuses"),
        ({"y" * 244: 1.0}, None, {}, "at most 243 characters"),
        ({}, None, {"a/b": pd.DataFrame({"run": [0]})}, "a table named 'a/b'"),
    ],
    ids=["seed", "curves", "param", "paren", "curve", "path", "long", "table"],
)
def test_a_result_whose_names_cannot_be_recorded_is_refused(summary, curves, tables, needle):
    # "seed" overwrote every row's seed; "curves" the link to its curves (the report then
    # failed); a name MLflow refuses failed the cell run's write, then every resume.
    assert needle in unrecordable([{"status": "converged", **summary}], curves, tables)
    fine = pd.DataFrame({"run": [0], "step": [1], "loss/train": [0.5]})
    good = {"status": "converged", "y": 1.0, "note": "ok", "loss: final": 2.0}
    assert unrecordable([good], fine, {"samples": pd.DataFrame({"run": [0]})}) is None


def test_a_later_bundle_is_checked_for_types_but_may_lack_a_column():
    lean = Experiment("lean", ntk.CONFIG, ntk.GRIDS, ntk.train, ntk.CLAIMS[:1])
    stringly = BundleResult([{"status": "converged", **READ, "ntk_margin": "1.0"}] * 2, None)
    with pytest.raises(PluginError, match="ntk_margin as a str, which claim 'width_threshold'"):
        lean.check_result(stringly, 2, "width", whole=False)  # was recorded without the value
    lean.check_result(BundleResult([{"status": "converged"}] * 2, None), 2, "width", whole=False)
    with pytest.raises(PluginError, match="which train\\(\\) does not return"):
        lean.check_result(BundleResult([{"status": "converged"}] * 2, None), 2, "width")


def test_a_claims_label_is_a_plain_file_name_and_mlflow_key_whatever_its_by_value():
    assert file_stem("alignment_rate[ngd]") == "alignment_rate-ngd"
    assert file_stem("rate[a/b (c)]") == "rate-a_b__c_"  # was a folder, and an MLflow error


@pytest.mark.slow
def test_a_train_that_calls_sys_exit_fails_its_runs_once_with_its_message(tmp_path):
    # Ray took the SystemExit for a worker that died: 12 retries, 50 s, and the plugin's
    # message replaced by WorkerCrashedError.
    exiting = PLUGIN.replace(
        "    return BundleResult(summaries,",
        "    if runs[0].experiment.k == 8.0:\n"
        "        raise SystemExit('no k of 8')\n"
        "    return BundleResult(summaries,",
    )
    proc = _sweep(tmp_path, exiting, "sweep.progress=false")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "lost its worker" not in proc.stderr
    assert "sdyn: a run failed: RuntimeError: train raised SystemExit('no k of 8')" in proc.stdout
    runs = load_sweep("toy-ks-none", f"sqlite:///{tmp_path}/mlflow.db")
    assert sorted(runs.loc[runs["status"] == "failed", "experiment.k"]) == [8.0, 8.0]
