"""The path rules on their own: normalisation, every path_* reason, collision keys."""

from __future__ import annotations

import pytest

from recovery.packages import report as codes
from recovery.packages.paths import check_path, collision_key


@pytest.mark.parametrize(
    ("raw", "normalised", "is_dir"),
    [
        ("journal.jsonl", "journal.jsonl", False),
        ("./journal.jsonl", "journal.jsonl", False),
        ("state//a///b", "state/a/b", False),
        ("state/./a/./b", "state/a/b", False),
        ("state/", "state", True),
        ("state/sub/.", "state/sub", True),
        ("./state//", "state", True),
        ("state/caf\u00e9", "state/caf\u00e9", False),
        ("state/...", "state/...", False),  # three dots are a name, not a traversal
        ("state/a..b", "state/a..b", False),
        # the archive's root (`tar -C dir .` starts with it): folded to "", a directory
        ("./", "", True),
        (".", "", True),
        (".//./", "", True),
    ],
)
def test_normalisation_folds_without_rejecting(raw: str, normalised: str, is_dir: bool) -> None:
    checked = check_path(raw)
    assert checked.ok, checked.problems
    assert (checked.normalised, checked.is_dir) == (normalised, is_dir)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("/etc/passwd", codes.PATH_ABSOLUTE),
        ("//server/share", codes.PATH_ABSOLUTE),
        ("\\\\server\\share", codes.PATH_ABSOLUTE),
        ("\\windows", codes.PATH_ABSOLUTE),
        ("C:evil", codes.PATH_ABSOLUTE),
        ("c:/evil", codes.PATH_ABSOLUTE),
        ("..", codes.PATH_TRAVERSAL),
        ("../x", codes.PATH_TRAVERSAL),
        ("state/..", codes.PATH_TRAVERSAL),
        ("state/../x", codes.PATH_TRAVERSAL),
        ("state/./../x", codes.PATH_TRAVERSAL),
        ("state//..//x", codes.PATH_TRAVERSAL),
        ("state\\..\\x", codes.PATH_TRAVERSAL),
        ("", codes.PATH_INVALID),
        ("state/a\x00b", codes.PATH_INVALID),
        ("state/a\nb", codes.PATH_INVALID),
        ("state/a\x7fb", codes.PATH_INVALID),
        ("state/a\x85b", codes.PATH_INVALID),  # a C1 control character
        ("state\\a", codes.PATH_INVALID),
        ("state/caf\udce9", codes.PATH_INVALID),  # a byte that was not UTF-8, as tarfile reports it
        ("state/" + "x" * 1019, codes.PATH_INVALID),  # 1,025 bytes
        ("state/" + "\u00e9" * 510, codes.PATH_INVALID),  # 1,026 bytes in UTF-8, 516 characters
    ],
)
def test_each_rule(raw: str, code: str) -> None:
    checked = check_path(raw)
    assert code in [c for c, _ in checked.problems]
    assert not checked.ok


def test_limit_is_inclusive() -> None:
    assert check_path("state/" + "x" * 1018).ok  # exactly 1,024 bytes


def test_every_reason_is_reported() -> None:
    found = {c for c, _ in check_path("/../a\x00\\b").problems}
    assert found == {codes.PATH_ABSOLUTE, codes.PATH_TRAVERSAL, codes.PATH_INVALID}


def test_collision_keys_fold_unicode_and_case() -> None:
    assert collision_key("state/caf\u00e9") == collision_key("state/cafe\u0301")
    assert collision_key("State/A") == collision_key("state/a")
    assert collision_key("state/stra\u00dfe") == collision_key("state/STRASSE")
    assert collision_key("state/\u212b") == collision_key("state/\u00e5")  # the angstrom sign
    assert collision_key("state/a") != collision_key("state/b")
