"""``agentloom serve``: a local Airflow on a dags folder, without Docker.

- :mod:`.cli`: the ``serve`` subcommand's arguments (imported by every ``agentloom`` command, so
  it imports nothing else of this package until ``serve`` runs);
- :mod:`.lifecycle`: the order of a serve, from the checks to the clean stop;
- :mod:`.prepare`: arguments, ports and the home; :mod:`.stack`: the components;
  :mod:`.watchdog`: what stops them when serve itself is killed.
"""
