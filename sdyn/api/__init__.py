"""The public experiment contract: what a theorem's experiment gives sdyn, and what sdyn gives back.

An experiment is one :class:`Experiment` object, found by sdyn through the Python entry-point
group :data:`ENTRY_POINT_GROUP` (``[project.entry-points."sdyn.experiments"]`` in a
pyproject: ``NAME = "my_pkg.my_module:EXPERIMENT"``), or by naming its module on the command
line (``experiment=my_pkg.my_module``, a module with a module-level ``EXPERIMENT``) so that
trying an idea needs no packaging. sdyn's own experiments register through the same group.

What an experiment provides, and what sdyn does with it:

* ``config``: a dataclass of the run's hyperparameters (Hydra's ``experiment=NAME`` group,
  every field an override ``experiment.FIELD=...``; its ``__post_init__`` raises
  ``ValueError`` naming the key for an out-of-range value; a comment on a field's line is its
  ``--help`` note). Its ``name`` field is set to the experiment's name.
* ``grids``: grid name -> dataclass with ``name``, ``seeds`` and ``points()`` (the list of
  experiment overrides of every grid point, seeds excluded): ``+grid=NAME``.
* ``train(runs, device) -> BundleResult``: trains a bundle of :class:`Run` at once (batched
  along a leading run axis ``B = len(runs)``) on ``device`` (``"cpu"``, ``"cuda"`` or None:
  CUDA when visible). Each run's summary holds ``status`` and the scalars the claims read;
  curves are a long table (``run``, ``step``, one column per metric).
* ``claims``: the theorem's statements, each an instance of a claim kind (a subclass of
  :class:`Claim`: sdyn's nine in :mod:`sdyn.analysis.kinds`, or the plugin's own), which sdyn
  measures and judges by the kind's rules.

Optional, with defaults that work: ``data`` (data set name -> dataclass; default: none),
``validate(run)`` (raises ``ValueError`` for a run that cannot train, e.g. a data set too
small; checked before anything is written), ``shape_key`` / ``pack_key`` (runs with equal
keys share a bundle; default: the resolved config without its seed), ``footprint(run)``
(bytes of the largest per-run tensor, which sizes bundles and ``--plan``'s cost model; default
1: every run alike), ``gpu_footprint`` (the footprint from which
``cluster.device=auto`` trains on a GPU; default None: always on the CPU), ``step_cost(runs)``
(FLOP and bytes moved by one iteration of a bundle's step, for ``--plan``'s GPU estimate;
default None: no GPU estimate), ``full_budget(run)`` (for an experiment whose runs stop early:
the run made to train its whole budget, which ``--plan``'s probe times to learn the cost of a
step; default None: runs always train their budget), ``steps_forecast(runs)`` (per run, the
step at which it is forecast to stop early, which ``--plan`` prices it at; default None: every
run at its whole budget), ``figures``
(a paper's figures, drawn from the curves), ``scatter_plot``, ``conf_dir`` (a folder of the
plugin's own Hydra YAML, added to Hydra's search path), ``sweeps`` (named sweeps the plugin
ships: name -> overrides, run by ``--sweep NAME``; :mod:`sdyn.named_sweeps`), ``references``
(the papers) and
``version`` (the experiment's code, part of every run's key: a run recorded under another
version is trained again, not reused; default: the version of the distribution that installs
the entry point, or for a module named by path a hash of that module's source file). An
editable install (``pip install -e``) keeps its version while its code changes, and a module's
hash does not see the modules it imports: bump the distribution's version or set ``version``
when ``train`` changes what it returns, or run the sweep again with ``sweep.retrain=true``.

``--plan``'s probe reads two fields of a run's config where it has them: ``steps`` (the GD
budget; without it a run is timed whole, as one step) and ``record_points`` (how many times a
run records; the probe sets it to 2 to time the steps alone).

Nothing here imports Ray or MLflow: an experiment's science runs anywhere torch does.

The contract is in three parts, each imported from here: the experiment
(:mod:`sdyn.api.experiment`), the claim and what the report draws (:mod:`sdyn.api.claim`), and
a plugin's errors (:mod:`sdyn.api.errors`).
"""

from sdyn.api.claim import (
    DIRECTIONS,
    KINDS,
    NAME,
    OPS,
    Assumption,
    Claim,
    Describe,
    Figure,
    Panel,
    PaperFigure,
)
from sdyn.api.errors import PluginError, blamed
from sdyn.api.experiment import (
    ENTRY_POINT_GROUP,
    MEASURED,
    STATUSES,
    BundleResult,
    Experiment,
    NoData,
    Run,
    lazy_names,
)
from sdyn.experiments.common import (
    log_spaced_steps,
    require,
    require_recording,
    require_sample_sizes,
    resolve_device,
)
from sdyn.search import SearchGrid

__all__ = [
    "DIRECTIONS",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "MEASURED",
    "NAME",
    "OPS",
    "STATUSES",
    "Assumption",
    "BundleResult",
    "Claim",
    "Describe",
    "Experiment",
    "Figure",
    "NoData",
    "Panel",
    "PaperFigure",
    "PluginError",
    "Run",
    "SearchGrid",
    "blamed",
    "lazy_names",
    "log_spaced_steps",
    "require",
    "require_recording",
    "require_sample_sizes",
    "resolve_device",
]
