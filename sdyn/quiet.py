"""The terminal kept for sdyn's own lines: what MLflow and Ray print unasked, turned off. Shared
by the command lines (``python -m sdyn.sweep``, ``python -m sdyn.report``) and what they start."""

from __future__ import annotations

import logging
import os


def quiet_libraries() -> None:
    """Keep the terminal for sdyn's own progress and table: MLflow's and Ray's chatter off. Call
    it again after importing MLflow or Ray: importing them sets their loggers' levels."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage reports from sweeps
    # With a tracking server MLflow prints two "View run" lines per run ended (one per cell).
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    for name in ("mlflow", "alembic", "ray"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Ray 2.60 announces its default (token authentication for a new local instance) as a
    # warning above every sweep's output; nothing to act on (README, "On a cluster").
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR
    )
