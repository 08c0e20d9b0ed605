"""How steps reach what lies outside Airflow's task: LLM connections, the model gateway, secret masking.

Nothing here imports ``operators``: operators reach their models through ``AgentLoomLLMHook``.
"""
