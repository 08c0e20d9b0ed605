"""The AgentLoom workflow format: YAML text to strict models, their graph, templates and results.

Pure: no Airflow import. The plan, render side, operators and runner all read a ``Workflow`` from here.
"""
