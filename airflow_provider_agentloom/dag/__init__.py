"""The Airflow render side: a workflow file becomes one DAG, or one clear import error.

Airflow's rules with file and line (:mod:`.checks`), the DAG (:mod:`.build`), one file
(:mod:`.from_file`), the dags-folder loader (:mod:`.loader`).
"""
