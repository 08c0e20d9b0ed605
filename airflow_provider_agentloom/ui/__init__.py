"""AgentLoom's pages in Airflow's UI: a run summary tab and a DAG spend tab (an Airflow UI plugin)."""
