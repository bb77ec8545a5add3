"""``python -m loopx_client drop-torn-tail PATH --reason "..."``: the client's command line."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import JournalError
from .repair import drop_torn_tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loopx_client")
    commands = parser.add_subparsers(dest="command", required=True)
    drop = commands.add_parser(
        "drop-torn-tail",
        help="remove a journal's torn last line (a write cut short by a crash), kept in PATH.repairs.jsonl",
    )
    drop.add_argument("path")
    drop.add_argument("--reason", required=True, help="why the line may go (kept with the removed bytes)")
    drop.add_argument("--who", default=None, help="who decided (default: user@host)")
    args = parser.parse_args(argv)
    try:
        dropped = drop_torn_tail(args.path, reason=args.reason, who=args.who)
    except (JournalError, OSError, ValueError) as error:
        print(f"refused: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"dropped_line": dropped.line, "offset": dropped.offset, "removed_bytes": len(dropped.removed),
                      "repairs": str(dropped.repairs)}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
