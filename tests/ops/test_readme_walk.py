"""The README's "Send your first journal" walk, as a newcomer types it: its shell blocks run against a live
server on the port `$PORT` names, write their files under a temporary folder, and both batches are stored
with no violation."""

from __future__ import annotations

import json
import os
import re
import subprocess
from urllib.parse import urlsplit

import pytest

from journals.models import Run
from tests.engine.helpers import REPO_ROOT
from trail.tokens import api_token_create

pytestmark = pytest.mark.django_db(transaction=True)


def _walk_blocks() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Send your first journal", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```\n(.*?)```", section, flags=re.S)


def test_the_first_journal_walk_works_as_written(live_server, tmp_path):
    blocks = _walk_blocks()
    assert len(blocks) >= 2
    first, second = blocks[:2]  # the stable commands' list follows
    # The token is made in this test's database; the rest of the walk runs as written.
    making, rest = first.split("\n", 2)[:2], first.split("\n", 2)[2]
    assert "create_api_token" in making[0] and making[1].startswith("TOKEN=")
    _, token = api_token_create(name="my-runtime", run_prefix="", actor_name="test")
    port = str(urlsplit(live_server.url).port)
    env = {"PATH": os.environ["PATH"], "TOKEN": token, "PORT": port, "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    script = f'set -e\ncd {REPO_ROOT}\n{rest}\necho\n{second}\necho\necho "$PWD"'
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    *answers, where = [line for line in done.stdout.splitlines() if line.strip()]
    stored = [json.loads(answer) for answer in answers]
    assert [a["stored"] for a in stored] == [1, 1] and [a["violations"] for a in stored] == [[], []]
    assert stored[1]["branches"] == [{"branch": 0, "committed_lsn": 1, "last_lsn": 1}]
    assert Run.objects.get(run_id="first-run").record_count == 2
    # The files went to the temporary folder, not the checkout.
    assert where.startswith(str(tmp_path)) and not (REPO_ROOT / "first.jsonl").exists()
