"""Entry-point discovery finds what ``importlib.metadata.entry_points`` finds, parsing fewer files."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

from airflow_provider_agentloom.tools.registry import ENTRY_POINT_GROUP, _group_entry_points


def _dist(site: Path, name: str, version: str, entry_points_text: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points_text)


def test_same_entry_points_as_importlib_first_distribution_of_a_name_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "acme-tools", "2.0", f"[{ENTRY_POINT_GROUP}]\nacme = acme_tools:TOOLS\n")
    # An older copy of the same package later on the path: importlib ignores it, and so must we.
    _dist(second, "Acme.Tools", "1.0", f"[{ENTRY_POINT_GROUP}]\nold = acme_tools_old:TOOLS\n")
    _dist(
        second,
        "other-tools",
        "1.0",
        f"[console_scripts]\nx = y:z\n\n[{ENTRY_POINT_GROUP}]\nmore = more:TOOLS\n",
    )
    _dist(second, "unrelated", "1.0", "[console_scripts]\nunrelated = unrelated:main\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    for group in (ENTRY_POINT_GROUP, "console_scripts"):
        assert _group_entry_points(group) == list(entry_points(group=group))
    found = {(ep.name, ep.value) for ep in _group_entry_points(ENTRY_POINT_GROUP)}
    assert found == {("acme", "acme_tools:TOOLS"), ("more", "more:TOOLS")}


def test_the_list_is_kept_until_a_package_is_installed_or_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of a process that listed them (a scheduler, the warm runner) reads no package's files;
    installing or removing a package (a ``.dist-info`` folder on ``sys.path``) is seen at once."""
    from airflow_provider_agentloom.tools import registry

    site = tmp_path / "site"
    _dist(site, "acme-tools", "1.0", f"[{ENTRY_POINT_GROUP}]\nacme = acme_tools:TOOLS\n")
    monkeypatch.syspath_prepend(str(site))
    registry.warm_entry_points()
    names = {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)}
    assert "acme" in names

    def no_reads() -> None:
        raise AssertionError("the installed packages were read again")

    with monkeypatch.context() as reads:
        reads.setattr(registry, "distributions", no_reads)
        assert {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)} == names

    _dist(site, "more-tools", "1.0", f"[{ENTRY_POINT_GROUP}]\nmore = more_tools:TOOLS\n")  # installed
    assert {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)} == names | {"more"}
    for item in (site / "acme_tools-1.0.dist-info").iterdir():  # uninstalled
        item.unlink()
    (site / "acme_tools-1.0.dist-info").rmdir()
    assert {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)} == (names - {"acme"}) | {"more"}


def test_a_folder_new_on_the_path_is_the_only_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task process's path has a folder its parent's had not (Airflow adds the DAG bundle's):
    that folder is read, the packages of the others are not."""
    from airflow_provider_agentloom.tools import registry

    site, bundle = tmp_path / "site", tmp_path / "bundle"
    _dist(site, "acme-tools", "1.0", f"[{ENTRY_POINT_GROUP}]\nacme = acme_tools:TOOLS\n")
    bundle.mkdir()
    monkeypatch.syspath_prepend(str(site))
    registry.warm_entry_points()
    names = {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)}
    assert "acme" in names

    read: list[list[str]] = []
    real = registry.distributions

    def recorded(**kwargs: list[str]) -> object:
        read.append(kwargs["path"])
        return real(**kwargs)

    monkeypatch.setattr(registry, "distributions", recorded)
    monkeypatch.syspath_prepend(str(bundle))
    assert {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)} == names
    assert read == [[str(bundle)]]
    # A package in the new folder comes first, as importlib would have it.
    _dist(bundle, "acme-tools", "3.0", f"[{ENTRY_POINT_GROUP}]\nnewer = newer:TOOLS\n")
    assert _group_entry_points(ENTRY_POINT_GROUP) == list(entry_points(group=ENTRY_POINT_GROUP))
    assert {ep.name for ep in _group_entry_points(ENTRY_POINT_GROUP)} == (names - {"acme"}) | {"newer"}
