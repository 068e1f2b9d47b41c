"""Everything that talks to MLflow. What a sweep leaves in the store, in one MLflow experiment
(``tracking.experiment``, tagged ``sdyn.store_version``):

- a **parent run** per sweep (tags ``sdyn.kind=sweep``, ``sdyn.sweep=<name>`` and
  ``sdyn.plan=<digest of its run hashes and a search's probes>``): the resolved config as
  params and ``config.yaml``, ``plan.json`` (the config hash of every planned run), one param
  ``sdyn.driver.<generation>`` per driver that took the sweep on, the live driver's lease
  (tag ``sdyn.lease``) and the report. Its Parquet artifacts, one file per write (at most one
  per bundle):
  the **run table** ``runs/<write>.parquet`` (a row per training run: config hash, cell, seed,
  status, the experiment's code version, params, every summary scalar, where its curves lie),
  the full-resolution curves ``curves/<write>.parquet`` and an experiment's extra tables
  ``tables/<name>/<write>.parquet``;
- a **cell run** per grid cell (a configuration without its seed), child of the parent (tags
  ``sdyn.kind=cell``, ``sdyn.cell``, ``sdyn.config_hashes``, ``sdyn.status.<status>`` counts):
  params = the cell's hyperparameters and ``seeds``; metrics = each summary scalar's median, min
  and max over seeds (``median/<name>``, ...) and the median curves ``curve/<metric>``
  (<= 20 points, which the MLflow UI plots); ``seeds.csv``, the per-seed table, and
  ``tracebacks/seed-<k>.txt`` for each failed run.

The run table is what resume and analysis read; cell runs are what a person browses. Records
are never deleted. Modules: :mod:`.store` (connect, ride out outages), :mod:`.sweeps` (the
parent, its plan, the driver's lease), :mod:`.table` (the run table's columns, reading it back),
:mod:`.record` (writing the run table and the cell runs).
"""

from sdyn.api import STATUSES

# Layout of what this package writes; bump on incompatible changes.
STORE_VERSION = 2
# The one run status (of sdyn.api's) that is not a measurement: retried only on request.
FAILED = STATUSES[-1]
