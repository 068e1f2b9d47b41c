"""The science: sdyn's own experiments, one module per model family, each a plugin like any
other (:mod:`sdyn.api`): a module-level ``EXPERIMENT``, registered through the
``sdyn.experiments`` entry points in pyproject.toml. Modules know nothing of Ray or MLflow.
"""
