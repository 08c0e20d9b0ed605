"""AgentLoom's pages in Airflow's UI: a run summary tab and a DAG spend tab (an Airflow UI plugin).

The HTML is built in :mod:`.pages`, from runs read through the door (:mod:`.reading`).
"""
