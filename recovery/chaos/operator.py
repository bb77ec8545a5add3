"""The rig's operator: `turn_approve` (the console's service call) against the server's database.

    python -m recovery.chaos.operator --run R --turn T --actor NAME --reason WHY [--evidence INTENT=FINDING]

Exit 0 when approved; 4 with the service's refusal (its code and detail) on stdout otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recovery.chaos.operator")
    parser.add_argument("--run", required=True)
    parser.add_argument("--turn", required=True)
    parser.add_argument("--actor", required=True)
    parser.add_argument("--reason", required=True)
    parser.add_argument("--evidence", action="append", default=[], help="INTENT=happened|not_happened")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopx_site.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Group, User

    from journals.models import Turn
    from kernel.errors import ServiceError
    from recovery.services import turn_approve

    user, created = User.objects.get_or_create(username=args.actor)
    if created:
        user.groups.add(Group.objects.get(name="operator"))
    turn = Turn.objects.select_related("run").get(run__run_id=args.run, turn_id=args.turn)
    evidence = dict(item.split("=", 1) for item in args.evidence)
    try:
        view = turn_approve(turn=turn, actor=user, reason=args.reason, evidence=evidence)
    except ServiceError as error:
        print(json.dumps({"refused": getattr(error, "code", type(error).__name__), "detail": str(error)}))
        return 4
    print(json.dumps(view.summary(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
