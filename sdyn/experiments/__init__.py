"""The science: sdyn's own experiments, one package per model family, each a plugin like any
other (:mod:`sdyn.api`): its ``EXPERIMENT`` in ``__init__.py``, registered through the
``sdyn.experiments`` entry points in pyproject.toml; its config and claims load without torch,
its model on first use. Packages know nothing of Ray or MLflow.
"""
