"""One Airflow task per workflow step: the step lifecycle (``base``) and one operator per step type.

Each step type supplies what it renders and runs; the shared run-time services come from ``services``.
"""
