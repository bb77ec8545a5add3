"""Archives made with ``tar czf pkg.tar.gz -C dir .``: the first entry is ``./`` and every member is ``./x``.

docs/packages.md folds ``./`` components instead of rejecting them, so such a package is accepted by
``check_archive`` and restored by ``restore_archive`` exactly as one made from inside the directory.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from recovery.packages import report as codes
from recovery.packages.paths import check_path

from .crafting import E, make_archive, package_entries


def _spread(tmp_path: Path) -> Path:
    """The entries of a valid package written out as a directory tree."""
    root = tmp_path / "dir"
    for e in package_entries():
        target = root / e.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(e.data)
    return root


def _command(*args: str) -> tuple[int, dict[str, object]]:
    out = io.StringIO()
    try:
        call_command(*args, "--json", stdout=out)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, json.loads(out.getvalue())


@pytest.mark.parametrize("flags", ["czf", "cf"])
def test_tar_minus_c_dot_is_accepted_and_restored(tmp_path: Path, flags: str) -> None:
    if shutil.which("tar") is None:
        pytest.fail("tar is not installed: this test makes its archive with the real tool")
    root = _spread(tmp_path)
    pkg = tmp_path / "pkg.archive"
    subprocess.run(["tar", flags, str(pkg), "-C", str(root), "."], check=True)
    names = subprocess.run(["tar", "tf", str(pkg)], check=True, capture_output=True, text=True).stdout.split()
    assert names[0] == "./" and all(n.startswith("./") for n in names)

    code, checked = _command("check_archive", str(pkg))
    assert code == 0 and checked["accepted"] is True and checked["findings"] == [], checked
    assert checked["members"] == len(names)

    into = tmp_path / "restored"
    code, restored = _command("restore_archive", str(pkg), "--into", str(into))
    assert code == 0 and restored["accepted"] is True, restored
    made = sorted(str(p.relative_to(into)) for p in into.rglob("*") if p.is_file())
    assert made == ["journal.jsonl", "manifest.json", "state/a.json", "state/sub/b.bin"]
    assert (into / "state/sub/b.bin").read_bytes() == (root / "state/sub/b.bin").read_bytes()


# A zip marks a directory by its trailing "/": "." there is a file (the next test's case).
ROOTS = [(fmt, name) for fmt in ("tar", "tar.gz", "zip") for name in ("./", ".", ".//", "././")]


@pytest.mark.parametrize(("fmt", "root_name"), [(f, n) for f, n in ROOTS if f != "zip" or n.endswith("/")])
def test_a_root_directory_entry_is_folded_in_every_format(tmp_path: Path, fmt: str, root_name: str) -> None:
    entries = [E(root_name, kind="dir"), *(E("./" + e.name, e.data) for e in package_entries())]
    pkg = tmp_path / f"pkg.{fmt}"
    pkg.write_bytes(make_archive(fmt, entries))
    code, checked = _command("check_archive", str(pkg))
    assert code == 0 and checked["findings"] == [], checked


def test_a_file_or_a_second_root_still_names_nothing(tmp_path: Path) -> None:
    """Only a directory entry is the root: a file called "./" names nothing a file could be."""
    assert check_path("./").is_root and check_path(".").is_root
    assert not check_path("/").is_root and not check_path("./..").is_root
    entries = [E("./", b"", kind="file"), *package_entries()]
    pkg = tmp_path / "pkg.tar"
    pkg.write_bytes(make_archive("tar", entries))
    code, checked = _command("check_archive", str(pkg))
    assert code == 1
    assert [f["code"] for f in checked["findings"]] == [codes.PATH_INVALID]  # type: ignore[index]


def test_every_refusal_says_what_to_do() -> None:
    assert set(codes.REMEDIES) == set(codes.ALL_CODES)
    for code in codes.ALL_CODES:
        assert codes.remedy(code).endswith(".") and len(codes.remedy(code)) > 20, code
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("check_archive", str(Path(__file__)), stdout=out)  # not an archive at all
    assert "what to do: Pack it again as .tar, .tar.gz or .zip" in out.getvalue()
