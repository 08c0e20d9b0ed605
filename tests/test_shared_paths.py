"""``require_shared``: a missing ``../shared`` skips a corpus test on a workstation and fails it under CI."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_paths import require_shared


def test_a_present_path_is_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    assert require_shared(tmp_path) == tmp_path


@pytest.mark.parametrize("unset", ["", "0", "false"])
def test_a_missing_path_skips_outside_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unset: str) -> None:
    monkeypatch.setenv("CI", unset)
    with pytest.raises(pytest.skip.Exception, match="the upstream corpus"):
        require_shared(tmp_path / "absent")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match=str(tmp_path / "absent")):
        require_shared(tmp_path / "absent")


@pytest.mark.parametrize("value", ["1", "true"])
def test_a_missing_path_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="AGENTLOOM_SHARED_DIR"):
        require_shared(tmp_path / "absent")
