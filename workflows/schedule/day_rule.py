"""Which day rule the built-in `next_occurrence` follows in this run.

Classic cron ANDs the day-of-month and day-of-week fields when one begins with `*`; schedules
recorded before the rule ORed them, and replay must compute their ticks as they were. So
the first time this run computes a time of an expression the rule changes
(`cron.day_rule_matters`), outside a query or a validator, it asks
`workflow.patched("cron-classic-day-rule")`: a new run, or a running one on new code,
records the marker and follows classic cron; replaying a history from before the rule finds
no marker and keeps the old rule. The answer holds for the rest of the run. An expression
the rule does not change never asks, so its schedule records no marker.

Each run decides afresh, and nothing is carried across continue-as-new: the next run
starts on the current code and follows classic cron. The tick a run carries over was found
by the rule of the run before; when the classic rule is chosen it is checked again
(`cron.classic_next_at`), so a day classic cron skips does not fire once more. (Not under a
`next_occurrence` of a deployment's own: it may read the expression another way. Its
decision is still made, for one that calls the built-in.)
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.schedule import cron
    from workflows.schedule.core import ScheduleCore

CLASSIC_DAY_RULE_PATCH = "cron-classic-day-rule"


class DayRule:
    """This run's choice of day rule: undecided until an expression it changes is used."""

    def __init__(self, core: ScheduleCore, builtin: bool) -> None:
        """`builtin`: whether the schedule's `next_occurrence` is the built-in one."""
        self._core = core
        self._builtin = builtin
        self._classic: bool | None = None

    @property
    def classic(self) -> bool:
        """Whether `next_occurrence` ANDs the day fields now. Undecided, it does: a decision
        now would record the marker. Queries and validators read this and never decide."""
        return self._classic is not False

    def decide(self, expression: str | None = None) -> None:
        """Call before the core computes a time of the stored schedule (or of `expression`,
        about to be set) in a handler or the main loop, never in a query or validator."""
        stored = self._core.state.schedule
        if stored is not None and stored.expression is not None:
            self._decide(stored.expression)
        if expression is not None:
            self._decide(expression)

    def _decide(self, expression: str) -> None:
        if self._classic is not None:
            return
        if not cron.day_rule_matters(expression):
            return
        self._classic = workflow.patched(CLASSIC_DAY_RULE_PATCH)
        if self._classic and self._builtin:
            self._core.revise_next_at(cron.classic_next_at)
