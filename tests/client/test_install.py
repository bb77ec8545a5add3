"""`pip install ./client` into a fresh virtual environment without Django works, and a script there using
Journal writes a journal that `manage.py assess_journal` reads with no violation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from certification.server import PROJECT_ROOT

SCRIPT = textwrap.dedent(
    """
    import sys
    from loopx_client import DEFAULT_PHASES, Journal

    with Journal(sys.argv[1], run="installed-1") as journal:
        journal.plan("t1", "first-journal")
        for phase in DEFAULT_PHASES:
            if phase == "dispatch":
                with journal.effect("t1", "send", "unsafe", local_write_ahead=True):
                    pass
            journal.commit("t1", phase)
        journal.terminal("t1")
        journal.plan("t2", "second", phases=["plan", "act"])
        journal.commit("t2", "plan")
    try:
        import loopx_client.langgraph  # noqa: F401
    except ImportError as error:
        print("the langgraph extra named:", "loopx-client[langgraph]" in str(error))
    try:
        import django  # noqa: F401
    except ImportError:
        print("no django")
    """
)


@pytest.mark.slow
def test_pip_install_into_a_fresh_venv_without_django(tmp_path):
    venv = tmp_path / "venv"
    # A bare venv (no pip of its own: ensurepip is slow); the project's pip installs into it (--python),
    # building the client in an isolated build environment as any pip would.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(PROJECT_ROOT / "client")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    journal = tmp_path / "first.jsonl"
    proc = subprocess.run(
        [str(python), "-c", SCRIPT, str(journal)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,  # not the project: the installed package, nothing else
    )
    # The core needs the standard library only; the LangGraph adapter says which extra it needs.
    expected = "the langgraph extra named: True\nno django"
    assert proc.returncode == 0 and proc.stdout.strip() == expected, proc.stdout + proc.stderr
    where = subprocess.run(
        [str(python), "-c", "import loopx_client; print(loopx_client.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert str(venv) in where
    assessed = subprocess.run(
        [sys.executable, "manage.py", "assess_journal", str(journal), "--json", "--expect", "0:12"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert assessed.returncode == 0, assessed.stderr
    result = json.loads(assessed.stdout)
    assert result["violations"] == [] and result["records"] == 13
    assert [(t["turn"], t["decision"]) for t in result["turns"]] == [("t1", "complete"), ("t2", "resume")]
