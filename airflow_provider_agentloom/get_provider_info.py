"""``get_provider_info``: what Airflow's providers manager reads about this provider (no imports)."""

from __future__ import annotations

from typing import Any

from airflow_provider_agentloom import __version__

CONN_TYPE = "agentloom_llm"


def _limit(description: str, kind: str, default: str) -> dict[str, Any]:
    return {
        "description": description + " Read when the loader and `agentloom validate` run.",
        "version_added": "0.1.0",
        "type": kind,
        "example": None,
        "default": default,
    }


# The defaults are workflow.limits.ParseLimits' (a test keeps them equal); keys are its fields
# with the ``workflow_`` prefix.
_WORKFLOW_LIMIT_OPTIONS: dict[str, dict[str, Any]] = {
    "workflow_max_file_bytes": _limit(
        "Largest workflow file (and subworkflow file) read, in bytes.", "integer", "4194304"
    ),
    "workflow_max_nodes": _limit(
        "Most YAML nodes in one workflow file, each alias counted as the nodes it repeats "
        "(refuses 'billion laughs' files).",
        "integer",
        "200000",
    ),
    "workflow_max_depth": _limit(
        "Deepest nesting of mappings and lists in a workflow file, subworkflow files included.",
        "integer",
        "64",
    ),
    "workflow_max_steps": _limit(
        "Most steps in one workflow file, subworkflows included.", "integer", "5000"
    ),
    "workflow_parse_timeout": _limit(
        "Seconds one workflow file may take to read and validate; a file that takes longer "
        "becomes a placeholder DAG (tried again at the next parse).",
        "float",
        "20.0",
    ),
    "workflow_allowed_folders": _limit(
        "More folders a subworkflow's workflow_path may name (absolute, comma-separated), besides "
        "the folder of the workflow file that names it and the dags folder of the loader. A path "
        "outside them (a symbolic link's target included) is a validation error: a workflow never "
        "reads, nor quotes, a file elsewhere.",
        "string",
        "",
    ),
}


def get_provider_info() -> dict[str, Any]:
    """Return the provider metadata Airflow discovers through the ``apache_airflow_provider`` entry point."""
    return {
        "package-name": "airflow-provider-agentloom",
        "name": "AgentLoom",
        "description": "Run AgentLoom LLM workflows (YAML) as Airflow DAGs, one task per step.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "AgentLoom",
                "external-doc-url": "https://github.com/agentloom/airflow-provider-agentloom#readme",
                "tags": ["ai"],
            }
        ],
        "operators": [
            {
                "integration-name": "AgentLoom",
                "python-modules": [
                    "airflow_provider_agentloom.operators.tool",
                    "airflow_provider_agentloom.operators.llm",
                ],
            }
        ],
        "hooks": [
            {"integration-name": "AgentLoom", "python-modules": ["airflow_provider_agentloom.hooks.llm"]}
        ],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_provider_agentloom.hooks.llm.AgentLoomLLMHook",
                "hook-name": "AgentLoom LLM",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port", "login", "extra"],
                    "relabeling": {"password": "API Key", "host": "Base URL"},
                    "placeholders": {
                        "host": "https://api.openai.com/v1 (leave empty for the vendor's default)",
                        "password": "sk-...",
                    },
                },
                "conn-fields": {
                    "vendor": {
                        "label": "Vendor",
                        "description": "Wire format of the API: openai (also vLLM, llama.cpp, LM Studio), "
                        "anthropic, google, ollama or mock.",
                        "schema": {
                            "type": ["string", "null"],
                            "enum": ["openai", "anthropic", "google", "ollama", "mock", None],
                            "default": "openai",
                        },
                    },
                    "default_model": {
                        "label": "Default model",
                        "description": "Model used by steps that name none (overrides config.model).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "extra_headers": {
                        "label": "Extra headers",
                        "description": "JSON object of HTTP headers sent with every request.",
                        "schema": {"type": ["object", "null"]},
                    },
                    "request_timeout": {
                        "label": "Request timeout (s)",
                        "description": "Seconds one model call may take in all, streamed or not; "
                        "a step's request_timeout wins. Default: [agentloom] llm_request_timeout (600).",
                        "schema": {"type": ["number", "null"], "exclusiveMinimum": 0},
                    },
                    "max_reply_bytes": {
                        "label": "Max reply size (bytes)",
                        "description": "The most one reply may hold (body; text, reasoning and tool-call "
                        "arguments together). Default: [agentloom] llm_max_reply_bytes (10 MiB).",
                        "schema": {"type": ["integer", "null"], "minimum": 1},
                    },
                    "max_concurrent_calls": {
                        "label": "Max concurrent calls",
                        "description": "The most model steps on this connection running at once, across "
                        "every worker and DAG: they run in the Airflow pool agentloom_<conn_id> of this "
                        "many slots, which the DAG loader creates or resizes when it parses.",
                        "schema": {"type": ["integer", "null"], "minimum": 1},
                    },
                },
            }
        ],
        "config": {
            "agentloom": {
                "description": "Settings of the AgentLoom provider.",
                "options": {
                    "working_dir": {
                        "description": "The directory built-in tools run from in Airflow tasks "
                        "('the directory you run from'); sandbox paths are resolved against it. "
                        "{dag_id} and {run_id} are filled in. A workflow's config.airflow.working_dir "
                        "wins. Never the dags folder.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/data/agentloom/{dag_id}",
                        "default": None,
                    },
                    "llm_request_timeout": {
                        "description": "Seconds one model call may take in all, from the request to the "
                        "last byte, streams included (httpx's timeout bounds each read only). Past it the "
                        "call fails with a retryable error. A connection's request_timeout extra and a "
                        "step's request_timeout win.",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "120",
                        "default": "600",
                    },
                    "llm_max_reply_bytes": {
                        "description": "The most one model reply may hold: a body as received, one stream "
                        "line, and a stream's text, reasoning and tool-call arguments together. Past it the "
                        "call fails, not retryable. A connection's max_reply_bytes extra wins.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "1048576",
                        "default": "10485760",
                    },
                    "max_parallel_tool_calls": {
                        "description": "Tool calls of one model reply that run at the same time; the "
                        "others wait their turn.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "4",
                        "default": "8",
                    },
                    "max_tool_calls_per_reply": {
                        "description": "Tool calls one model reply may ask for; those past it go back to "
                        "the model as errors and do not run.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "16",
                        "default": "32",
                    },
                    "kernel_sandbox": {
                        "description": "The kernel layer under an enabled sandbox: shell_command runs "
                        "under a Landlock ruleset built from the sandbox's path lists, and in a network "
                        "namespace of its own with allow_network: false. auto: where the kernel allows "
                        "it (logged once per process where it does not); required: a step whose "
                        "command cannot get it fails (not retried); off: the string checks only. "
                        "AGENTLOOM_KERNEL_SANDBOX overrides it.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "required",
                        "default": "auto",
                    },
                    "parse_cache_dir": {
                        "description": "Where the loader keeps each valid workflow file's parse between "
                        "Airflow's parses of the dags folder, keyed by the text of the file and of its "
                        "subworkflow files: a fresh parsing process then reads only what changed. Made "
                        "private to the user (0700); a folder others may write to is not used. Unset: "
                        "$AIRFLOW_HOME/agentloom/parse-cache. off: no cache.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "off",
                        "default": None,
                    },
                    "keep_tool_results": {
                        "description": "Whether the results of a model's tool calls are kept in the task "
                        "state store, so a retry (the same run of attempts) replays a call that already "
                        "ran instead of running its tool again. A person's clear runs them again. One "
                        "store entry per tool call, masked, at most 10 MiB as JSON.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    "preload_modules": {
                        "description": "Whether a process that loads Airflow's plugins (set it for the "
                        "scheduler, the dag-processor and the triggerer) imports AgentLoom's loader, "
                        "operators and tools then, so that the parses and tasks it forks (the "
                        "LocalExecutor's) start with them instead of importing them each time. "
                        "agentloom serve turns it on for the components it starts.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                    "ignore_stale_resume_exits": {
                        "description": "Whether a scheduler drops the exit of a task's try that parked "
                        "(an approval gate waiting for its answer) or deferred, when the executor reports "
                        "it after the resumed try was queued: Airflow 3.3 reads it as the resumed try's "
                        "end and fails that try, and a gate answered in that moment asks again "
                        "(apache/airflow#67287, #72716; this applies their fix, on Airflow 3.3 only). False: "
                        "Airflow's own handling.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "False",
                        "default": "True",
                    },
                    **_WORKFLOW_LIMIT_OPTIONS,
                },
            }
        },
    }
