"""The sweep's parent run in a real MLflow store (SQLite file, local artifacts)."""

import json
import shutil
from pathlib import Path

from mlflow.tracking import MlflowClient

from sdyn.tracking import sweeps


def test_a_parent_whose_artifacts_were_deleted_gets_its_plan_again(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("sdyn", artifact_location=str(tmp_path / "mlruns"))
    parent = client.create_run(experiment_id).info.run_id
    config = {"experiment": {"name": "ntk", "m": 8}}
    hashes = ["a" * 16, "b" * 16]
    sweeps.complete_parent(client, parent, config, hashes)
    assert client.get_run(parent).data.tags["sdyn.ready"] == "1"

    # The database is kept, the artifact root deleted: the next driver writes the plan again,
    # so that the report still knows which runs the sweep planned.
    shutil.rmtree(tmp_path / "mlruns")
    sweeps.complete_parent(client, parent, config, hashes)
    plan = json.loads(
        Path(client.download_artifacts(parent, "plan.json", str(tmp_path))).read_text()
    )
    assert plan == {"hashes": hashes}
    assert client.get_run(parent).data.params["experiment.m"] == "8"
