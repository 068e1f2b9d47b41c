"""Named sweeps (sdyn.named_sweeps): found on a search path, --sweeps-path, then ./sweeps, then
sdyn's own, then the installed experiments' ``sweeps``; the first found wins."""

import dataclasses
import os
import re
import subprocess
import sys
import textwrap

import pytest

from sdyn import named_sweeps
from sdyn.api import PluginError
from sdyn.experiments import ntk


def _yaml(folder, name: str, *overrides: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"  - {o}\n" for o in overrides)
    (folder / f"{name}.yaml").write_text(f"description: a test\noverrides:\n{lines}")


def _sdyn(args: list[str], cwd, pythonpath=()) -> subprocess.CompletedProcess:
    path = os.pathsep.join([*map(str, pythonpath), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


def test_sdyns_own_named_sweeps_are_package_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no sweeps/ here: sdyn's own are found wherever one stands
    assert named_sweeps.SDYN_SWEEPS.parent.name == "sdyn"
    assert named_sweeps.overrides("implicit_fig3")[:2] == [
        "experiment=implicit_bias",
        "+grid=iters",
    ]
    assert "ntk_width" in named_sweeps.known()


def test_a_users_sweeps_come_first_in_the_order_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _yaml(tmp_path / "sweeps", "ntk_width", "+grid=width", "grid.seeds=1")  # shadows sdyn's
    _yaml(tmp_path / "sweeps", "mine", "+grid=width", "grid.seeds=2")
    _yaml(tmp_path / "a", "mine", "+grid=width", "grid.seeds=3")
    _yaml(tmp_path / "b", "mine", "+grid=width", "grid.seeds=4")
    assert named_sweeps.overrides("ntk_width") == ["+grid=width", "grid.seeds=1"]
    assert named_sweeps.overrides("mine")[1] == "grid.seeds=2"
    assert named_sweeps.overrides("mine", [tmp_path / "b", tmp_path / "a"])[1] == "grid.seeds=4"
    assert named_sweeps.known([tmp_path / "a"]).count("mine") == 1


def test_the_command_line_takes_sweeps_path_and_refuses_a_missing_folder(tmp_path):
    _yaml(tmp_path / "mine", "small", "+grid=width", "grid.n=[8,16]", "grid.seeds=2")
    proc = _sdyn(["--sweeps-path", "mine", "--sweep", "small", "--cfg"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "# named small (a store" in proc.stdout  # the sweep is named after it
    assert "# expands to 48 runs = 24 cells x 2 seeds" in proc.stdout
    proc = _sdyn(["--sweeps-path", "nowhere", "--sweep", "small", "--cfg"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "sdyn: error: --sweeps-path nowhere: not a directory"
    proc = _sdyn(["--sweep", "smal", "--cfg"], tmp_path)
    assert proc.returncode == 2 and "no named sweep 'smal'" in proc.stderr
    assert "ntk_width" in proc.stderr  # the known ones
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing written


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "overrides: [+grid=width, grid.n=[8]\n",
            "mine/bad.yaml is not valid YAML: ",
        ),  # a traceback
        ("- +grid=width\n", "mine/bad.yaml needs an 'overrides' list"),  # a list: a traceback
        ("description: none\n", "mine/bad.yaml needs an 'overrides' list"),
    ],
)
def test_a_broken_named_sweep_file_is_one_line(tmp_path, monkeypatch, text, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "bad.yaml").write_text(text)
    with pytest.raises(ValueError, match="^mine/bad.yaml") as caught:
        named_sweeps.overrides("bad", ["mine"])
    assert needle in str(caught.value)


# An installed plugin (an entry point in a .dist-info on the path) that ships a named sweep.
PLUGIN = """
import dataclasses
from sdyn.experiments import ntk

EXPERIMENT = dataclasses.replace(
    ntk.EXPERIMENT, name="shipper", sweeps={"shipped": ("+grid=width", "grid.seeds=3")}
)
"""


def test_an_installed_plugin_ships_named_sweeps(tmp_path):
    site = tmp_path / "site"
    _install(site, "shipper", PLUGIN)
    proc = _sdyn(["--sweep", "shipped", "grid.n=[8]", "--cfg"], tmp_path, [site])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "name: shipper" in proc.stdout and "seeds: 3" in proc.stdout  # experiment=shipper
    assert "# named shipped (a store" in proc.stdout  # the sweep is named after it


def test_a_plugins_sweeps_must_be_override_strings():
    with pytest.raises(PluginError, match="sweep 'x' must be a tuple of override strings"):
        dataclasses.replace(ntk.EXPERIMENT, sweeps={"x": "+grid=width"})


@pytest.mark.slow
def test_a_named_sweep_with_other_overrides_is_a_sweep_of_its_own(tmp_path):
    # Its name was sweep.name=NAME: a variant (fewer seeds) was refused ("exists with another
    # plan"), or took the name first and the named sweep itself was refused after it.
    _yaml(tmp_path / "sweeps", "small", "+grid=width", "grid.n=[8]", "grid.widths=[4,16]")
    quick = ["experiment.steps=100", "sweep.progress=false"]
    proc = _sdyn(["--sweep", "small", "grid.seeds=1", *quick], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sweep small: 2 of 2 planned runs recorded" in proc.stdout, proc.stdout
    proc = _sdyn(["--sweep", "small", *quick, "--plan"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"plan of sweep small-[0-9a-f]{6} ", proc.stdout), proc.stdout


def _install(site, name: str, source: str) -> None:
    """A distribution ``name`` on ``site`` registering the experiment of module ``name``."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[sdyn.experiments]\n{name} = {name}:EXPERIMENT\n")
    (site / f"{name}.py").write_text(textwrap.dedent(source))


def test_a_broken_plugin_hides_no_others_sweep_and_two_shipping_one_name_are_refused(tmp_path):
    # A broken installed plugin failed --sweep for every plugin's sweep; of two shipping one
    # name, the first in alphabetical order won without a word.
    site = tmp_path / "site"
    _install(site, "shipper", PLUGIN)
    _install(site, "broken", "raise ImportError('no')\n")
    proc = _sdyn(["--sweep", "shipped", "grid.n=[8]", "--cfg"], tmp_path, [site])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "name: shipper" in proc.stdout
    missing = _sdyn(["--sweep", "nowhere", "--cfg"], tmp_path, [site])
    assert missing.returncode == 2 and "importing broken failed" in missing.stderr
    _install(site, "rival", PLUGIN.replace('name="shipper"', 'name="rival"'))
    twice = _sdyn(["--sweep", "shipped", "--cfg"], tmp_path, [site])
    assert twice.returncode == 2, twice.stderr[-2000:]
    assert twice.stderr.strip().splitlines() == [
        "sdyn: error: named sweep 'shipped' is shipped by experiments rival and shipper: "
        "uninstall one"
    ]
