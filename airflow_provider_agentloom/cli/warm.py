"""``python -m airflow_provider_agentloom.cli.warm --home DIR``: start the warm runner of a home.

The composition root of the warm runner: the runner (``runner/warm/server.py``) runs each command it
is handed with the :func:`~airflow_provider_agentloom.cli.run_cli` given here, so ``runner/`` never
imports the CLI above it.
"""

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


if __name__ == "__main__":
    _drop_repeated_path_entries()

    from airflow_provider_agentloom.cli import run_cli
    from airflow_provider_agentloom.runner.warm.server import main

    sys.exit(main(run_command=run_cli))
