"""What tasks a workflow becomes: task ids and scopes, decided once and engine-neutral.

No Airflow import: the render side, the operators and the runner all read their ids and scopes from here.
"""
