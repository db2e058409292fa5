"""``chaos explore``: generate fault schedules from a base scenario, run each for real, judge it against the
invariants every recovery must keep, and shrink a schedule that breaks one to a scenario file.

space.py (what can be broken where, and the hypothesis strategy), invariants.py (each invariant as the
schedule's expectations), search.py (the budgeted loop, shrinking, reproduction), report.py (JSON, markdown,
picture). docs/explore.md.
"""
