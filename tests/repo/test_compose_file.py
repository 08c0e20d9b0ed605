"""Static checks of docker-compose.yaml, Dockerfile and .dockerignore (no Docker engine needed).

They catch what breaks ``docker compose up`` silently or late: a service missing the shared Airflow
environment, a dangling ``depends_on``, workers pointed at an api-server that is not there, a
misspelled Airflow option, an image whose Airflow differs from the pinned one, an unset variable.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CONSTRAINTS = ROOT / "constraints.txt"

AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
}
COMMANDS = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
    "airflow-worker": "celery worker",
}
REQUIRED_ENV = {
    "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": None,
    "AIRFLOW__CELERY__BROKER_URL": None,
    "AIRFLOW__CELERY__RESULT_BACKEND": None,
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": None,
    "AIRFLOW__API_AUTH__JWT_SECRET": None,
    "AIRFLOW__CORE__FERNET_KEY": None,
    "AIRFLOW__CORE__AUTH_MANAGER": (
        "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    ),
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__AGENTLOOM__WORKING_DIR": None,
}
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?err}; "$${...}" is an escaped literal "${...}".
_VARIABLE = re.compile(r"(?<!\$)\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def _interpolate(value: str) -> str:
    """Compose's variable substitution with every variable unset (so defaults apply)."""
    return _VARIABLE.sub(lambda m: m["arg"] if m["op"] in ("-", ":-") else "", value).replace("$$", "$")


def _env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: _interpolate(str(value)) for key, value in environment.items()}


def _command(service: dict[str, Any]) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else str(command)


def _pinned_airflow_version() -> str:
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"apache-airflow==(\S+)", line.strip())
        if match:
            return match.group(1)
    raise AssertionError("constraints.txt pins no apache-airflow version")


def _dockerfile() -> tuple[str, dict[str, str]]:
    """Dockerfile text with continuation lines joined, and the ARG defaults."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.MULTILINE))
    return text, args


def _expand_args(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), value)


def test_parses_with_the_expected_services(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert "x-airflow-common" in compose
    assert set(services) == {"postgres", "redis", *AIRFLOW_SERVICES}
    for name in AIRFLOW_SERVICES:
        # Every Airflow service comes from the shared anchor: same image, built from ./Dockerfile.
        assert services[name]["image"] == compose["x-airflow-common"]["image"], name
        assert services[name]["build"] == ".", name
    for name, command in COMMANDS.items():
        assert _command(services[name]) == command, name
    init = services["airflow-init"]
    assert _env(init).get("_AIRFLOW_DB_MIGRATE") == "true", "airflow-init must migrate the database"


def test_every_airflow_service_has_the_common_env(compose: dict[str, Any], services: dict[str, Any]) -> None:
    common = _env(compose["x-airflow-common"])
    for key, expected in REQUIRED_ENV.items():
        assert key in common, key
        if expected is not None:
            assert common[key] == expected, key
    for name in AIRFLOW_SERVICES:
        env = _env(services[name])
        for key, value in common.items():
            assert env.get(key) == value, f"{name}: {key} is {env.get(key)!r}, not the common {value!r}"


def test_airflow_options_exist(compose: dict[str, Any]) -> None:
    """Every AIRFLOW__SECTION__KEY names a real option (a typo there is silently ignored)."""
    from airflow.configuration import retrieve_configuration_description

    from airflow_provider_agentloom.get_provider_info import get_provider_info

    known = retrieve_configuration_description(include_airflow=True, include_providers=False)
    known.update(get_provider_info()["config"])
    if importlib.util.find_spec("airflow.providers.celery") is not None:
        from airflow.providers.celery.get_provider_info import get_provider_info as celery_info

        known.update(celery_info()["config"])
    for key in _env(compose["x-airflow-common"]):
        if not key.startswith("AIRFLOW__"):
            continue
        section, option = (part.lower() for part in key.removeprefix("AIRFLOW__").split("__", 1))
        if section.startswith("celery") and section not in known:
            continue  # the Celery provider is not installed here; the image has it
        assert option in known.get(section, {}).get("options", {}), f"{key}: no option [{section}] {option}"


def test_depends_on_targets_exist(services: dict[str, Any]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on") or {}
        targets = depends_on if isinstance(depends_on, list) else list(depends_on)
        for target in targets:
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
    for name in AIRFLOW_SERVICES:
        depends_on = services[name]["depends_on"]
        assert depends_on["postgres"]["condition"] == "service_healthy", name
        assert depends_on["redis"]["condition"] == "service_healthy", name
        if name != "airflow-init":
            assert depends_on["airflow-init"]["condition"] == "service_completed_successfully", name
    # Workers call the Execution API: they start once the api-server is healthy.
    assert services["airflow-worker"]["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"


def test_long_running_services_have_healthchecks(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name == "airflow-init":
            assert "restart" not in service, "a one-shot init must not restart"
            continue
        test = service.get("healthcheck", {}).get("test")
        assert test, f"{name} has no healthcheck"
    scheduler_check = " ".join(services["airflow-scheduler"]["healthcheck"]["test"])
    assert ":8974/health" in scheduler_check
    assert _env(services["airflow-scheduler"])["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"


def _container_port(service: dict[str, Any]) -> int:
    (mapping,) = service["ports"]
    return int(_interpolate(str(mapping)).rsplit(":", 1)[-1])


def test_execution_api_url_points_at_the_api_server(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    url = urlsplit(_env(compose["x-airflow-common"])["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    api_servers = [name for name, command in COMMANDS.items() if command == "api-server"]
    assert url.hostname in api_servers, f"{url.hostname} is not the api-server service {api_servers}"
    api_server = services[url.hostname]
    assert url.port == _container_port(api_server)
    assert url.path == "/execution/"
    assert f"localhost:{url.port}/" in " ".join(api_server["healthcheck"]["test"])


def test_database_and_broker_urls_match_their_services(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    env = _env(compose["x-airflow-common"])
    postgres = _env(services["postgres"])
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__RESULT_BACKEND"):
        url = urlsplit(env[key])
        assert url.scheme.removeprefix("db+").split("+")[0] == "postgresql", key
        assert url.hostname == "postgres", key
        assert (url.username, url.password, url.path.lstrip("/")) == (
            postgres["POSTGRES_USER"],
            postgres["POSTGRES_PASSWORD"],
            postgres["POSTGRES_DB"],
        ), key
    broker = urlsplit(env["AIRFLOW__CELERY__BROKER_URL"])
    assert broker.scheme == "redis"
    assert broker.hostname == "redis"
    assert str(broker.port) in [str(port) for port in services["redis"]["expose"]]


def _volumes(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    result = []
    for volume in service.get("volumes", []):
        source, target, *mode = _interpolate(volume).split(":")
        result.append((source, target, mode[0] if mode else "rw"))
    return result


def test_dags_mount_is_the_repo_dags_folder(compose: dict[str, Any]) -> None:
    common = compose["x-airflow-common"]
    dags_folder = _env(common).get("AIRFLOW__CORE__DAGS_FOLDER", "/opt/airflow/dags")
    mounts = [(source, mode) for source, target, mode in _volumes(common) if target == dags_folder]
    assert len(mounts) == 1, f"no single mount at the dags folder {dags_folder}"
    source, mode = mounts[0]
    assert source.startswith("./"), "the dags mount should be the repo's folder"
    assert mode == "ro"
    folder = (COMPOSE.parent / source).resolve()
    assert folder.is_dir(), folder
    loaders = [p for p in folder.glob("*.py") if "load_workflows" in p.read_text(encoding="utf-8")]
    assert loaders, f"no loader .py in {folder}"
    assert list(folder.glob("*.yaml")), f"no workflow YAML in {folder}"


def test_named_volumes_are_declared_and_hold_the_working_dir(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    mounts = []
    for service in [compose["x-airflow-common"], *compose["services"].values()]:
        for source, target, _ in _volumes(service):
            if not source.startswith((".", "/")):
                assert source in declared, f"volume {source} is not declared"
            mounts.append(target)
    working_dir = _env(compose["x-airflow-common"])["AIRFLOW__AGENTLOOM__WORKING_DIR"]
    assert any(working_dir.startswith(target.rstrip("/") + "/") for target in mounts), working_dir
    text, _ = _dockerfile()
    base = working_dir.split("/{", 1)[0]
    assert f"mkdir -p {base}" in text, "the image must create the working dir (owned by the airflow user)"


def test_every_variable_has_a_default_or_is_documented() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    for match in _VARIABLE.finditer(text):
        if match["op"] in ("-", ":-"):
            continue
        assert re.search(rf"\b{match['name']}\b", comments), f"${{{match['name']}}} has no default and no doc"


def test_demo_secrets_and_llm_credentials(compose: dict[str, Any]) -> None:
    from airflow_provider_agentloom.get_provider_info import CONN_TYPE

    common = compose["x-airflow-common"]
    assert len(_env(common)["AIRFLOW__API_AUTH__JWT_SECRET"]) >= 64, "a short JWT secret draws warnings"
    assert common["env_file"] == [{"path": ".env", "required": False}]
    text = COMPOSE.read_text(encoding="utf-8")
    for documented in ("AIRFLOW_CONN_AGENTLOOM_LLM_DEFAULT", "OPENAI_API_KEY", f'"conn_type": "{CONN_TYPE}"'):
        assert documented in text, documented
    assert ".env" in DOCKERIGNORE.read_text(encoding="utf-8").split(), ".env must stay out of the image"


def test_dockerfile_matches_the_pinned_airflow() -> None:
    version = _pinned_airflow_version()
    text, args = _dockerfile()
    (image,) = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert _expand_args(image, args) == f"apache/airflow:{version}"
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert installs, "the Dockerfile installs nothing"
    for line in installs:
        assert f'"apache-airflow=={version}"' in _expand_args(line, args), line


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    text, _ = _dockerfile()
    ignored = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git"} <= ignored, "the build context must not carry the venv or the git history"
    for line in re.findall(r"^COPY\s+(.+)$", text, re.MULTILINE):
        sources = [part for part in line.split() if not part.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY source {source} does not exist"
            assert source not in ignored, f"COPY source {source} is excluded by .dockerignore"
    copied = " ".join(re.findall(r"^COPY\s+(.+)$", text, re.MULTILINE))
    for needed in ("pyproject.toml", "README.md", "airflow_provider_agentloom"):
        assert needed in copied.split(), f"the package build needs {needed}"
