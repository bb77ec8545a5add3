"""Layer: projection (docs/contract.md section 7): the JSON of `assess_journal --json`, its exit codes
and arguments, and the human table. The command is run the way scripts run it: a subprocess of
`manage.py` from the repository root (no database involved)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import assess
from recovery.management.commands.assess_journal import Command
from tests.engine.helpers import PYTHON, REPO_ROOT, full_turn, put, run, to_json, turn, write_journal, writer

TOP_KEYS = ["run", "live_branch", "records", "violations", "turns"]
VIOLATION_KEYS = ["code", "branch", "lsn", "turn", "detail"]
TURN_KEYS = ["turn", "lineage", "branch", "decision", "resume_from", "reason", "completed_phases", "intents"]
INTENT_KEYS = ["intent", "effect_class", "branch", "live", "resolution"]


def manage_many(*argvs: list[str]) -> list[subprocess.CompletedProcess[bytes]]:
    """Run several `manage.py assess_journal` processes at once (each one starts Django: seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    procs = [
        (
            argv,
            subprocess.Popen(
                [PYTHON, "manage.py", "assess_journal", *argv],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            ),
        )
        for argv in argvs
    ]
    done = []
    for argv, proc in procs:
        out, err = proc.communicate(timeout=180)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done


def manage(*args: str) -> subprocess.CompletedProcess[bytes]:
    return manage_many(list(args))[0]


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The command's own argv handling, in this process (fast, for the argument matrix)."""
    code = 0
    try:
        Command().run_from_argv(["manage.py", "assess_journal", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _journal() -> Any:
    """Two branches, intents of every class, a retry across the fork, a violation on one turn."""
    w = writer(run="run-é")
    w.plan("late", "job-1")  # planned first, so listed first whatever its name
    w.plan("alpha", "job-1", phases=["a", "b"])
    w.dispatch("alpha", "read", "safe")
    point = w.mark()
    w.commit("alpha", "a")
    w.dispatch("alpha", "put", "idempotent", key="k-1")
    w.plan("gone", "job-2")
    w.fork(point)
    w.dispatch("alpha", "put", "idempotent", key="k-1")  # latest dispatch on branch 1
    w.observe("alpha", "put", "succeeded")
    w.dispatch("alpha", "pay", "unsafe")
    w.observe("alpha", "pay", "failed")
    full_turn(w, "done")
    w.plan("broken", "job-3")
    w.commit("broken", "execute")
    return w


def _ordered(raw: bytes) -> Any:
    return json.loads(raw, object_pairs_hook=lambda pairs: pairs)


def _keys(pairs: Any) -> list[str]:
    return [k for k, _ in pairs]


def test_the_json_shape_is_exactly_section_7(tmp_path: Path) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    proc = manage(str(path), "--json")
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout.endswith(b"\n") and proc.stdout.count(b"\n") == 1
    doc = _ordered(proc.stdout)
    assert _keys(doc) == TOP_KEYS
    top = dict(doc)
    assert top["violations"] and top["turns"]
    for violation in top["violations"]:
        assert _keys(violation) == VIOLATION_KEYS
    for t in top["turns"]:
        assert _keys(t) == TURN_KEYS
        for intent in dict(t)["intents"]:
            assert _keys(intent) == INTENT_KEYS
    assert proc.stdout == to_json(assess(path)) + b"\n"


def test_the_values_of_the_projection() -> None:
    doc = run(_journal()).to_dict()
    assert (doc["run"], doc["live_branch"], doc["records"]) == ("run-é", 1, len(_journal().lines))
    assert doc["violations"] == [
        {
            "code": "phase_prefix_violation",
            "branch": 1,
            "lsn": 14,
            "turn": "broken",
            "detail": doc["violations"][0]["detail"],
        }
    ]
    assert [t["turn"] for t in doc["turns"]] == ["late", "alpha", "gone", "done", "broken"]
    alpha = doc["turns"][1]
    assert alpha == {
        "turn": "alpha",
        "lineage": "job-1",
        "branch": 0,
        "decision": "resume",
        "resume_from": "b",
        "reason": None,
        "completed_phases": ["a"],
        "intents": [
            {"intent": "read", "effect_class": "safe", "branch": 0, "live": True, "resolution": "replay"},
            {"intent": "put", "effect_class": "idempotent", "branch": 1, "live": True, "resolution": "settled"},
            {"intent": "pay", "effect_class": "unsafe", "branch": 1, "live": True, "resolution": "settled"},
        ],
    }
    assert doc["turns"][2] == {
        "turn": "gone",
        "lineage": "job-2",
        "branch": 0,
        "decision": "discarded",
        "resume_from": None,
        "reason": None,
        "completed_phases": [],
        "intents": [],
    }
    assert doc["turns"][4]["reason"] == "phase_prefix_violation"
    assert doc["turns"][4]["resume_from"] is None


def test_one_entry_per_intent_described_by_its_latest_dispatch() -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe", key="k-1")
    w.observe("t1", "pay", "failed")
    point = w.mark()
    w.commit("t1", "plan")
    w.dispatch("t1", "pay", "unsafe", key="k-1")
    w.fork(point)
    [pay] = run(w).to_dict()["turns"][0]["intents"]
    # Latest dispatch: branch 0, on the discarded suffix, not read back; the first one is live and failed.
    assert pay == {"intent": "pay", "effect_class": "unsafe", "branch": 0, "live": True, "resolution": "indeterminate"}


def test_records_counts_complete_records_only() -> None:
    w = writer()
    full_turn(w, "t1")
    put(w, "phase_committed", turn="t1", phase="x", note=0.5)  # complete, but record_invalid: a record
    lines = [*w.lines, b'{"v":2,"run":"run-1","br']  # torn: not a record
    assert run(lines).records == len(w.lines)


def test_an_empty_journal() -> None:
    assert run([]).to_dict() == {"run": None, "live_branch": 0, "records": 0, "violations": [], "turns": []}


def test_assessing_twice_is_byte_identical_and_never_modifies_the_file(tmp_path: Path) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = (path.read_bytes(), os.stat(path).st_mtime_ns, os.stat(path).st_size)
    first, second = manage_many([str(path), "--json"], [str(path), "--json"])
    assert first.stdout == second.stdout and first.returncode == second.returncode == 0
    assert to_json(assess(path)) == to_json(assess(path))
    assert (path.read_bytes(), os.stat(path).st_mtime_ns, os.stat(path).st_size) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.jsonl"]  # nothing written beside it


def test_exit_0_whatever_the_decisions(tmp_path: Path) -> None:
    w = writer()
    w.plan("t1")
    lines = [*w.lines, b"{torn"]
    proc = manage(str(write_journal(tmp_path / "j.jsonl", lines)), "--json", "--expect", "0:7")
    assert (proc.returncode, proc.stderr) == (0, b"")
    doc = json.loads(proc.stdout)
    assert [v["code"] for v in doc["violations"]] == ["storage_corruption", "offset_mismatch"]
    assert doc["turns"][0]["reason"] == "storage_corruption"


EXIT_2 = {
    "missing-file": ["{missing}", "--json"],
    "directory": ["{dir}", "--json"],
    "bad-expect": ["{file}", "--json", "--expect", "zero:1"],
    "bad-evidence": ["{file}", "--json", "--evidence", "pay=maybe"],
    "unknown-flag": ["{file}", "--json", "--bogus"],
    "no-path": [],
}


def test_exit_2_with_one_line_on_stderr(tmp_path: Path) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    values = {"missing": str(tmp_path / "nope.jsonl"), "dir": str(tmp_path), "file": str(path)}
    results = manage_many(*([a.format(**values) for a in args] for args in EXIT_2.values()))
    for name, proc in zip(EXIT_2, results, strict=True):
        assert proc.returncode == 2, name
        assert proc.stdout == b"", name
        assert proc.stderr.count(b"\n") == 1 and proc.stderr.endswith(b"\n"), (name, proc.stderr)
        assert proc.stderr.startswith(b"assess_journal: "), (name, proc.stderr)
        assert b"Traceback" not in proc.stderr


def test_an_unreadable_file_is_exit_2(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads any file: the permission check cannot fail, so test the engine's own guard instead.
        from engine import JournalUnreadable

        with pytest.raises(JournalUnreadable):
            assess(tmp_path)
        return
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    path.chmod(0)
    proc = manage(str(path), "--json")
    assert proc.returncode == 2 and proc.stderr.count(b"\n") == 1


@pytest.mark.parametrize(
    "values, expected",
    [
        (["0:13"], {0: 13}),
        (["0:5", "1:-1"], {0: 5, 1: -1}),
        (["1:7", "1:8"], {1: 8}),  # the last one given for a branch counts
    ],
)
def test_expect_parsing(
    values: list[str], expected: dict[int, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    args = [str(path), "--json"]
    for v in values:
        args += ["--expect", v]
    code, out, err = in_process(capsys, *args)
    assert (code, err) == (0, "")
    assert json.loads(out) == run(_journal(), expect=expected).to_dict()


@pytest.mark.parametrize("value", ["0", "x:1", "0:y", "-1:3", "0:-2", ":", "0:1:2", ""])
def test_bad_expect_is_a_usage_error(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    code, out, err = in_process(capsys, str(path), "--json", "--expect", value)
    assert (code, out) == (2, "")
    assert err.startswith("assess_journal: ") and "--expect" in err and err.count("\n") == 1


def test_evidence_parsing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = writer()
    w.plan("t1")
    w.dispatch("t1", "pay", "unsafe")
    w.dispatch("t1", "a=b", "unsafe")
    path = write_journal(tmp_path / "j.jsonl", w.lines)
    code, out, err = in_process(
        capsys, str(path), "--json", "--evidence", "pay=happened", "--evidence", "a=b=not_happened"
    )
    assert (code, err) == (0, "")
    intents = json.loads(out)["turns"][0]["intents"]
    assert [(i["intent"], i["resolution"]) for i in intents] == [("pay", "settled"), ("a=b", "replay")]


@pytest.mark.parametrize("value", ["pay", "pay=", "=happened", "pay=maybe", "pay=HAPPENED"])
def test_bad_evidence_is_a_usage_error(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    code, out, err = in_process(capsys, str(path), "--json", "--evidence", value)
    assert (code, out) == (2, "")
    assert err.startswith("assess_journal: --evidence") and err.count("\n") == 1


def test_the_human_table(tmp_path: Path) -> None:
    path = write_journal(tmp_path / "j.jsonl", _journal().lines)
    proc = manage(str(path))
    assert (proc.returncode, proc.stderr) == (0, b"")  # no progress bar: stderr is not a terminal
    lines = proc.stdout.decode().splitlines()
    result = run(_journal())
    assert lines[0].split() == ["run", "run-é", "live", "branch", "1", "records", str(result.records)]
    assert lines[1].split()[:2] == ["violation", "phase_prefix_violation"]
    header = lines[2].split()
    assert header == ["turn", "decision", "resume_from", "reason", "completed"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert rows == {
        "late": ["resume", "plan", "-", "0/7"],
        "alpha": ["resume", "b", "-", "1/2"],
        "gone": ["discarded", "-", "-", "0/7"],
        "done": ["complete", "-", "-", "7/7"],
        "broken": ["blocked", "-", "phase_prefix_violation", "0/7"],
    }
    assert turn(result, "broken").reason == "phase_prefix_violation"
