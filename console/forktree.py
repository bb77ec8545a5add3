"""A run's fork tree, laid out for an inline SVG drawn by the server: the one layout of the run page and the
turn page (templates/console/_forktree.html draws it on both; the turn page marks its own lane and the
record that blocks the turn).

Each branch is a lane. A lane starts where its parent's kept prefix ends, so the x axis is the position on
a timeline: how many records precede a record on its timeline (a branch's lsn 0 sits right after the
parent's lsn ``from_lsn``). The axis is labelled with those positions, and each lane with its own lsns (its
first, its last, where it was forked and where its discarded suffix starts). A fork is drawn from the fork
record on the parent (with the reason it gave) down to the new lane; the discarded suffix of a branch is
drawn greyed, never hidden: discarded records are evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from journals.models import Branch

LANE_H, LEFT, RIGHT, TOP, WIDTH = 40, 96, 28, 34, 760
AXIS_TICKS = 6


@dataclass
class Tick:
    x: float
    label: str


@dataclass
class LaneMark:
    """A point of a lane worth naming: its lsn 0, its last lsn, the fork record, where discarding starts."""

    x: float
    lsn: int
    what: str


@dataclass
class Lane:
    number: int
    parent: int | None
    live: bool
    y: int
    x0: float
    x_keep: float  # end of the part on a timeline
    x1: float  # end of everything written on the branch
    discarded: bool
    from_lsn: int | None
    fork_lsn: int | None
    last_lsn: int
    discarded_from: int | None
    records: int
    parent_y: int | None = None
    fork_x: float | None = None  # x of the fork record on the parent lane
    reason: str = ""
    label: str = ""
    url: str = ""  # the branch's records in the event history
    fork_url: str | None = None  # the fork record that created it
    marks: list[LaneMark] = field(default_factory=list)


@dataclass
class Tree:
    lanes: list[Lane]
    width: int
    height: int
    ticks: list[Tick] = field(default_factory=list)
    axis_y: int = 14
    axis_x0: int = LEFT
    axis_x1: int = WIDTH - RIGHT
    marker: tuple[float, int] | None = None  # (x, y) of a record the page points at
    turn_lane: int | None = None  # the lane of the turn the page is about


def lay_out(
    branches: list[Branch],
    reasons: dict[int, str] | None = None,
    *,
    records_url: str = "",
    mark: tuple[int, int] | None = None,
    turn_lane: int | None = None,
) -> Tree:
    """``reasons``: the fork reason that created each branch (by the new branch's number). ``records_url``:
    the run's event history, each lane linking to its branch's records. ``mark``: (branch, lsn) of a record
    to point at; ``turn_lane``: the branch of the turn a page is about."""
    reasons = reasons or {}
    if not branches:
        return Tree(lanes=[], width=WIDTH, height=0)
    by_number = {b.number: b for b in branches}
    offsets: dict[int, int] = {}

    def offset(b: Branch, depth: int = 0) -> int:
        if b.number in offsets:
            return offsets[b.number]
        parent = by_number.get(b.parent) if b.parent is not None else None
        if parent is None or parent.number == b.number or depth > len(by_number):
            value = 0
        else:
            value = offset(parent, depth + 1) + (b.from_lsn if b.from_lsn is not None else -1) + 1
        offsets[b.number] = value
        return value

    span = max(offset(b) + max(b.last_lsn, 0) + 1 for b in branches) or 1
    scale = (WIDTH - LEFT - RIGHT) / span

    def x_of(b: Branch, lsn: float) -> float:
        return round(LEFT + (offset(b) + lsn) * scale, 1)

    lanes: list[Lane] = []
    for i, b in enumerate(sorted(branches, key=lambda b: b.number)):
        keep_end = b.last_lsn if b.discarded_from is None else min(b.discarded_from, b.last_lsn)
        discarded = b.discarded_from is not None and b.discarded_from < b.last_lsn
        lane = Lane(
            number=b.number,
            parent=b.parent,
            live=b.live,
            y=TOP + i * LANE_H,
            x0=x_of(b, 0),
            x_keep=x_of(b, keep_end + 1),
            x1=x_of(b, max(b.last_lsn, 0) + 1),
            discarded=discarded,
            from_lsn=b.from_lsn,
            fork_lsn=b.fork_lsn,
            last_lsn=b.last_lsn,
            discarded_from=b.discarded_from,
            records=b.record_count,
            reason=reasons.get(b.number, ""),
            url=f"{records_url}?branch={b.number}" if records_url else "",
        )
        if b.last_lsn >= 0:
            lane.marks.append(LaneMark(x_of(b, 0.5), 0, "first record"))
            if b.last_lsn > 0:
                lane.marks.append(LaneMark(x_of(b, b.last_lsn + 0.5), b.last_lsn, "last record"))
        if discarded and b.discarded_from is not None and b.discarded_from + 1 <= b.last_lsn:
            lane.marks.append(LaneMark(x_of(b, b.discarded_from + 1.5), b.discarded_from + 1, "first discarded"))
        words = ["live" if b.live else "earlier timeline"]
        if discarded and b.discarded_from is not None:
            words.append(f"lsn {b.discarded_from + 1}–{b.last_lsn} discarded")
        shown = f"lsn 0–{b.last_lsn}" if b.last_lsn >= 0 else "no record yet"
        lane.label = f"branch {b.number}: {shown}, " + ", ".join(words)
        lanes.append(lane)
    ys = {lane.number: lane for lane in lanes}
    for lane in lanes:
        parent = ys.get(lane.parent) if lane.parent is not None else None
        if parent is not None and lane.fork_lsn is not None:
            lane.parent_y = parent.y
            lane.fork_x = x_of(by_number[parent.number], lane.fork_lsn + 0.5)
    ticks = [
        Tick(round(LEFT + pos * scale, 1), str(pos))
        for pos in sorted({round(span * k / (AXIS_TICKS - 1)) for k in range(AXIS_TICKS)})
    ]
    marker = None
    if mark is not None and mark[0] in ys:
        marker = (x_of(by_number[mark[0]], mark[1] + 0.5), ys[mark[0]].y)
    height = TOP + LANE_H * (len(lanes) - 1) + 30
    return Tree(lanes=lanes, width=WIDTH, height=height, ticks=ticks, marker=marker, turn_lane=turn_lane)
