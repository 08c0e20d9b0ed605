"""``python -m airflow_provider_agentloom.runner.warm --home DIR``: start a home's warm runner."""

from __future__ import annotations

import sys


def _drop_repeated_path_entries() -> None:
    """Keep each ``sys.path`` folder once, at its first place.

    The client starts the runner in the package's parent folder, which ``-m`` puts first on
    ``sys.path``. For an installed package that folder is ``site-packages``, already further down
    the list, and a folder listed twice makes ``importlib.metadata`` yield each distribution in
    it twice: Airflow would then load every entry-point plugin twice and warn, on every run, that
    it was "already registered".
    """
    sys.path[:] = dict.fromkeys(sys.path)


_drop_repeated_path_entries()

from airflow_provider_agentloom.runner.warm.server import main  # noqa: E402  (after the path is fixed)

sys.exit(main())
