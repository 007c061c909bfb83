"""docs/operations.md and docker-compose.yml agree with the code and with each other."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import yaml

from durability import settings
from tests.support.helpers import PROJECT_ROOT
from workflows import search_attributes

OPERATIONS = (PROJECT_ROOT / "docs" / "operations.md").read_text()
README = (PROJECT_ROOT / "README.md").read_text()
DEPLOYMENT = (PROJECT_ROOT / "docs" / "deployment.md").read_text()
COMPOSE_TEXT = (PROJECT_ROOT / "docker-compose.yml").read_text()
SERVICES: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)["services"]
# Where a comment or a page sends the reader for more: `docs/x.md` or `(README|docs/x.md),
# "Section"`.
CITATION = re.compile(r'\b(README|docs/[\w-]+\.md)(?:, "([^"]+)")?')


def headings(markdown: str) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", markdown, re.MULTILINE)}


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_readme_links_the_deployment_page_which_links_the_operations_page() -> None:
    assert "(docs/deployment.md)" in README and "(docs/operations.md)" in README
    assert "(operations.md)" in DEPLOYMENT


def test_every_page_and_section_compose_and_the_docs_cite_exists() -> None:
    cited = CITATION.findall(COMPOSE_TEXT + OPERATIONS)
    assert ("docs/configuration.md", "Encryption") in cited
    for document, section in cited:
        path = PROJECT_ROOT / ("README.md" if document == "README" else document)
        assert path.exists(), document
        if section:
            assert section in headings(path.read_text()), f"{document} has no section {section!r}"


def test_every_repository_file_and_anchor_the_operations_page_cites_exists() -> None:
    for target in re.findall(r"\]\(([^)#]+\.md)(?:#([^)]*))?\)", OPERATIONS):
        path, fragment = target
        document = (PROJECT_ROOT / "docs" / path).resolve()
        assert document.exists(), path
        if fragment:
            assert fragment in {anchor(h) for h in headings(document.read_text())}, target
    for path in re.findall(r"`((?:deploy|workflows|durability)/[\w/.-]+)`", OPERATIONS):
        assert (PROJECT_ROOT / path).exists(), path


def test_the_operations_page_registers_exactly_the_products_search_attributes() -> None:
    expected = {
        (key.name, search_attributes.CLI_TYPE_NAMES[key.indexed_value_type.name])
        for key in search_attributes.ALL
    }
    table = set(re.findall(r"^\| `(Durability\w+)` \| (\w+) \|$", OPERATIONS, re.MULTILINE))
    self_hosted = set(re.findall(r"--name (Durability\w+) --type (\w+)", OPERATIONS))
    cloud = set(re.findall(r'"(Durability\w+)=(\w+)"', OPERATIONS))
    assert table == self_hosted == cloud == expected


def test_every_setting_the_operations_page_names_is_one_the_code_reads() -> None:
    known = {setting.name for setting in (*settings.SETTINGS, *settings.RUN_SETTINGS)}
    named = set(re.findall(r"\b((?:TEMPORAL|DURABILITY)_[A-Z_]*[A-Z])\b", OPERATIONS))
    unknown = {name for name in named if name not in known and not name.endswith("_META")}
    assert not unknown, f"not a setting: {unknown}"


def test_host_docker_internal_resolves_on_linux_wherever_compose_uses_it() -> None:
    for name, service in SERVICES.items():
        if "host.docker.internal" in yaml.safe_dump(service.get("environment", {})):
            assert "host.docker.internal:host-gateway" in service.get("extra_hosts", []), name


def published_host_ports() -> dict[int, str]:
    ports: dict[int, str] = {}
    for name, service in SERVICES.items():
        for mapping in service.get("ports", []):
            host_port = int(str(mapping).split(":")[-2])
            ports[host_port] = name
    return ports


def test_the_workers_default_urls_on_the_host_are_not_ports_compose_publishes() -> None:
    """A host URL on a port compose publishes (the UI's 8080) would reach that service, not
    the operator's ledger or webhook endpoint."""
    published = published_host_ports()
    assert published[8080] == "temporal-ui"
    environment = SERVICES["worker"]["environment"]
    for setting in ("DURABILITY_LEDGER_URL", "DURABILITY_WEBHOOK_ALLOWED_URLS"):
        default = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(environment[setting]))
        for url in default.split(","):
            parts = urlsplit(url)
            if parts.hostname == "host.docker.internal":
                assert parts.port not in published, f"{setting} {url} is {published[parts.port]}"
