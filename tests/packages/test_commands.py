"""check_archive and restore_archive: the stable JSON, and exit codes 0/1/2 from a real shell invocation.

The subprocess runs are started together (each pays Django's start-up) and checked one by one.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.management import call_command

from recovery.packages import report as codes

from .crafting import E, package_entries, write

REPO = Path(__file__).resolve().parents[2]
KEYS = ["accepted", "format", "members", "findings"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def test_exit_codes_from_the_shell(tmp_path: Path) -> None:
    good = write(tmp_path, "tar.gz", package_entries(), name="good")
    bad = write(tmp_path, "zip", package_entries(extra=[E("../evil", b"x")]), name="bad")
    (tmp_path / "exists").mkdir()
    runs = {
        "check-good": ("check_archive", str(good), "--json"),
        "check-bad": ("check_archive", str(bad), "--json"),
        "check-missing": ("check_archive", str(tmp_path / "missing.tar"), "--json"),
        "restore-good": ("restore_archive", str(good), "--into", str(tmp_path / "out"), "--json"),
        "restore-exists": ("restore_archive", str(good), "--into", str(tmp_path / "exists"), "--json"),
        "restore-bad": ("restore_archive", str(bad), "--into", str(tmp_path / "never"), "--json"),
        "restore-no-parent": ("restore_archive", str(good), "--into", str(tmp_path / "no" / "out"), "--json"),
        "restore-no-into": ("restore_archive", str(good), "--json"),
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(runs, pool.map(lambda args: _run(*args), runs.values()), strict=True))

    def json_of(name: str) -> dict[str, object]:
        lines = done[name].stdout.splitlines()
        assert len(lines) == 1, done[name].stdout
        out = json.loads(lines[0])
        assert list(out) == KEYS
        return out  # type: ignore[no-any-return]

    assert done["check-good"].returncode == 0
    assert json_of("check-good") == {"accepted": True, "format": "tar.gz", "members": 4, "findings": []}
    assert done["check-bad"].returncode == 1
    out = json_of("check-bad")
    assert out["accepted"] is False and out["format"] == "zip"
    assert out["findings"] == [{"code": "path_traversal", "member": "../evil", "detail": "a '..' component"}]
    for name in ("check-missing", "restore-no-parent", "restore-no-into"):
        assert done[name].returncode == 2, (name, done[name])
        assert done[name].stdout == ""
        assert len(done[name].stderr.strip().splitlines()) == 1, done[name].stderr
    assert done["restore-good"].returncode == 0 and json_of("restore-good")["accepted"] is True
    assert (tmp_path / "out" / "journal.jsonl").is_file()
    assert done["restore-exists"].returncode == 1
    assert [f["code"] for f in json_of("restore-exists")["findings"]] == ["target_exists"]  # type: ignore[union-attr]
    assert done["restore-bad"].returncode == 1 and not (tmp_path / "never").exists()
    assert sorted(os.listdir(tmp_path)) == ["bad.zip", "exists", "good.tar.gz", "out"]


def test_call_command_accepted_returns_normally(tmp_path: Path) -> None:
    good = write(tmp_path, "tar", package_entries())
    out = io.StringIO()
    call_command("check_archive", str(good), "--json", stdout=out)
    assert json.loads(out.getvalue())["accepted"] is True
    out = io.StringIO()
    call_command("check_archive", str(good), stdout=out)
    assert out.getvalue().startswith("accepted: a tar package of 4 member(s)")


def test_human_summary_of_a_rejection(tmp_path: Path) -> None:
    bad = write(tmp_path, "tar.gz", package_entries(extra=[E("../evil\x1b[31m", b"x")]))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        call_command("check_archive", str(bad), stdout=out)
    assert exc.value.code == 1
    text = out.getvalue()
    assert text.startswith("rejected: 2 finding(s), format tar.gz")
    assert "path_traversal" in text and "path_invalid" in text
    assert "\x1b" not in text  # member names are escaped, never printed raw to a terminal


def test_call_command_rejected_exits_1(tmp_path: Path) -> None:
    bad = write(tmp_path, "tar", package_entries(extra=[E("state/link", kind="symlink")]))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exc:
        call_command("restore_archive", str(bad), "--into", str(tmp_path / "out"), "--json", stdout=out)
    assert exc.value.code == 1
    assert json.loads(out.getvalue())["findings"][0]["code"] == codes.LINK_MEMBER


def test_call_command_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        call_command("check_archive", str(tmp_path / "missing"), "--json")
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        call_command("restore_archive", str(tmp_path / "missing"))  # --into is required
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("check_archive: ") and err[1].startswith("restore_archive: ")


def test_commands_take_their_limits_from_settings(tmp_path: Path, settings: object) -> None:
    settings.LOOPX_PACKAGE_MAX_MEMBERS = 3  # type: ignore[attr-defined]
    good = write(tmp_path, "zip", package_entries())
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("check_archive", str(good), "--json", stdout=out)
    assert [f["code"] for f in json.loads(out.getvalue())["findings"]] == [codes.TOO_MANY_MEMBERS]
