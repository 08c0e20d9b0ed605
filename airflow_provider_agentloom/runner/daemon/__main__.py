"""``python -m airflow_provider_agentloom.runner.daemon --home DIR``: start a home's warm runner."""

from __future__ import annotations

import sys

from airflow_provider_agentloom.runner.daemon.server import main

sys.exit(main())
