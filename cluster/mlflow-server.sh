#!/usr/bin/env bash
# An MLflow tracking server on PostgreSQL with an artifact store, for sdyn's `tracking=server`.
#
#   PGHOST=127.0.0.1 PGUSER=mlflow PGPASSWORD=... ARTIFACTS=s3://bucket/sdyn ./cluster/mlflow-server.sh
#
# Credentials come only from the environment (libpq reads PGPASSWORD; S3 keys from AWS_*), never
# from arguments, configs or logs. The server binds 127.0.0.1 unless MLFLOW_HOST says otherwise;
# put an authenticating proxy in front before opening it, or run MLflow's own users and passwords:
# MLFLOW_APP_NAME=basic-auth (pip install "mlflow[auth]"; MLflow reads MLFLOW_AUTH_CONFIG_PATH,
# MLFLOW_AUTH_ADMIN_USERNAME/PASSWORD and MLFLOW_FLASK_SERVER_SECRET_KEY from the environment).
# Needs: PostgreSQL reachable at PGHOST:PGPORT with a database $PGDATABASE owned by $PGUSER
# (createdb -O "$PGUSER" mlflow), and `pip install "psycopg[binary]"` (plus boto3 for S3).
set -euo pipefail
: "${PGHOST:=127.0.0.1}" "${PGPORT:=5432}" "${PGUSER:=mlflow}" "${PGDATABASE:=mlflow}"
: "${ARTIFACTS:=file://$PWD/mlartifacts}" "${MLFLOW_HOST:=127.0.0.1}" "${MLFLOW_PORT:=5000}"
: "${MLFLOW_WORKERS:=4}"  # server processes (MLflow's default); each starts in a few seconds
# MLflow's job runner (GenAI jobs: eight huey processes) is off unless asked for: sdyn has no
# jobs, and without it the server starts in about 4 s instead of 10-20 s on 2 cores.
: "${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:=false}"
export PGHOST PGPORT PGUSER PGDATABASE MLFLOW_SERVER_ENABLE_JOB_EXECUTION
exec mlflow server \
  --backend-store-uri "postgresql://${PGUSER}@${PGHOST}:${PGPORT}/${PGDATABASE}" \
  --artifacts-destination "${ARTIFACTS}" \
  --host "${MLFLOW_HOST}" --port "${MLFLOW_PORT}" --workers "${MLFLOW_WORKERS}" \
  ${MLFLOW_APP_NAME:+--app-name "${MLFLOW_APP_NAME}"}
