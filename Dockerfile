# Airflow with airflow-provider-agentloom installed from this repository's source.
#
#   docker compose build        # what docker-compose.yaml uses
#   docker build -t airflow-provider-agentloom:local .
#
# The official image already ships the PostgreSQL, Redis and Celery providers the compose file needs.
# apache-airflow is pinned in the same pip command, so pip cannot swap the image's Airflow version
# (https://airflow.apache.org/docs/docker-stack/build.html). Keep AIRFLOW_VERSION equal to the
# apache-airflow pin in constraints.txt (tests/repo/test_compose_file.py checks it).
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}
ARG AIRFLOW_VERSION

COPY --chown=airflow:0 pyproject.toml README.md LICENSE CHANGELOG.md /opt/airflow/agentloom-src/
COPY --chown=airflow:0 airflow_provider_agentloom /opt/airflow/agentloom-src/airflow_provider_agentloom

RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/airflow/agentloom-src \
    && mkdir -p /opt/airflow/agentloom-work
