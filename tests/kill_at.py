"""Run ``python -m sdyn.sweep`` and kill it (SIGKILL, as ``kill -9`` does) at a named point
between two of the driver's writes, a moment no outside signal can time.

    python tests/kill_at.py POINT [sweep arguments ...]

The points are reached by wrapping, from outside sdyn, the call that makes each write:

- ``parent_created``: MLflow created the sweep's parent run (before its plan is written);
- ``cell_created``: MLflow created a cell run (before its contents);
- ``table_written``: the artifact store holds a batch of run-table rows (before their cell);
- ``round_recorded``: the driver's training returned, its rows written (a threshold search's
  first round).
"""

import functools
import os
import runpy
import signal
import sys
from collections.abc import Callable

from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
from mlflow.tracking import MlflowClient

from sdyn import driver


def kill_after(owner: object, name: str, when: Callable[..., bool]) -> None:
    """Replace ``owner.name`` by a call of it that then dies when ``when(*args, **kwargs)``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def call(*args, **kwargs):
        result = original(*args, **kwargs)
        if when(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, call)


def created(kind: str) -> Callable[..., bool]:
    """Whether a ``create_run`` call made a run of tag ``sdyn.kind`` = ``kind``."""
    return lambda *args, tags=None, **kwargs: (tags or {}).get("sdyn.kind") == kind


POINTS = {
    "parent_created": lambda: kill_after(MlflowClient, "create_run", created("sweep")),
    "cell_created": lambda: kill_after(MlflowClient, "create_run", created("cell")),
    "table_written": lambda: kill_after(
        LocalArtifactRepository,
        "log_artifact",
        lambda self, local_file, artifact_path=None: artifact_path == "runs",
    ),
    "round_recorded": lambda: kill_after(driver, "train_and_record", lambda *args, **kw: True),
}

if __name__ == "__main__":
    POINTS[sys.argv.pop(1)]()
    runpy.run_module("sdyn.sweep", run_name="__main__", alter_sys=True)
