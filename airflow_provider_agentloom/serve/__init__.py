"""``agentloom serve``: a local Airflow on a dags folder, without Docker.

- :mod:`..cli.serve`: the ``serve`` subcommand (its arguments are in :mod:`..cli`'s parser);
- :mod:`.lifecycle`: the order of a serve, from the checks to the clean stop;
- :mod:`.prepare`: arguments, ports and the home; :mod:`.stack`: the components;
  :mod:`.watchdog`: what stops them when serve itself is killed.
"""
