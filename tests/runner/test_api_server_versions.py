"""The runner's private Execution API server serves the installed task SDK's API version only."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from airflow_provider_agentloom.runner.home import prepare_home
    prepare_home(Path(sys.argv[1]))
    from airflow_provider_agentloom._airflow import serve_latest_execution_api_only
    trimmed = serve_latest_execution_api_only()
    from airflow.api_fastapi.app import create_app
    from airflow.api_fastapi.execution_api import versions
    from airflow.sdk.api.datamodels._generated import API_VERSION
    from fastapi.testclient import TestClient
    client = TestClient(create_app(apps="execution"))
    def status(version):
        return client.get("/execution/health", headers={"airflow-api-version": version}).status_code
    print(json.dumps({
        "trimmed": trimmed,
        "versions": [v.value for v in versions.bundle.versions],
        "sdk": API_VERSION,
        "latest": status(API_VERSION),
        "older": status("2025-04-11"),
    }))
    """
)


def test_only_the_installed_version_is_built_and_served(tmp_path: Path) -> None:
    """Tasks forked from this installation speak its SDK's version: the only one built (the other
    eight cost ~4 s of CPU per run); a request for an older version is refused, not translated."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    assert probe["trimmed"] is True
    assert probe["versions"] == [probe["sdk"]]
    assert probe["latest"] == 200
    assert probe["older"] >= 400
