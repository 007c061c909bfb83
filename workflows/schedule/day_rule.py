"""Which reading of cron the built-in `next_occurrence` follows in this run.

Two changes of reading, each behind its own patch, asked only for an expression it changes:

- The day rule. Classic cron ANDs the day-of-month and day-of-week fields when one begins
  with `*`; schedules recorded before the rule ORed them. The first time this run computes a
  time of an expression the rule changes (`cron.day_rule_matters`), outside a query or a
  validator, it asks `workflow.patched("cron-classic-day-rule")`.
- crontab's reading of the fields (`workflows.schedule.crontab`): schedules recorded before
  it read them as croniter does (`9-9` as `*`, a `*` after a list's first item). Asked, the
  same way, for an expression the two readings fire differently on
  (`cron.crontab_reading_matters`): `workflow.patched("cron-crontab-reading")`.

A new run, or a running one on new code, records the marker and follows the new reading;
replaying a history from before it finds no marker and keeps the old one. The answer holds
for the rest of the run. An expression neither change touches never asks, so its schedule
records no marker.

Each run decides afresh, and nothing is carried across continue-as-new: the next run
starts on the current code and follows the new readings. The tick a run carries over was
found by the reading of the run before; when a new reading is chosen it is checked again
(`cron.classic_next_at`, `cron.crontab_next_at`), so a time the new reading does not fire at
does not fire once more. (Not under a `next_occurrence` of a deployment's own: it may read
the expression another way. Its decision is still made, for one that calls the built-in.)

The rules for a new `set` (`set_rules`) are a third change: the update validator always
applies them (it records nothing), the handler of a `set` (update or signal) asks
`workflow.patched("schedule-set-rules")` only when they refuse the request, so a history
that holds a `set` accepted without the rules replays as recorded.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.schedule import cron
    from workflows.schedule.core import ScheduleCore
    from workflows.schedule.patches import (
        CLASSIC_DAY_RULE_PATCH,
        CRONTAB_READING_PATCH,
        SET_RULES_PATCH,
    )


class DayRule:
    """This run's choice of readings: undecided until an expression one changes is used."""

    def __init__(self, core: ScheduleCore, builtin: bool) -> None:
        """`builtin`: whether the schedule's `next_occurrence` is the built-in one."""
        self._core = core
        self._builtin = builtin
        self._classic: bool | None = None
        self._crontab: bool | None = None
        self._set_rules: bool | None = None

    @property
    def builtin(self) -> bool:
        """Whether the schedule's `next_occurrence` is the built-in one."""
        return self._builtin

    @property
    def classic(self) -> bool:
        """Whether `next_occurrence` ANDs the day fields now. Undecided, it does: a decision
        now would record the marker. Queries and validators read this and never decide."""
        return self._classic is not False

    @property
    def crontab(self) -> bool:
        """Whether `next_occurrence` reads the fields as crontab(5) now (undecided: it does)."""
        return self._crontab is not False

    def decide(self, expression: str | None = None) -> None:
        """Call before the core computes a time of the stored schedule (or of `expression`,
        about to be set) in a handler or the main loop, never in a query or validator."""
        stored = self._core.state.schedule
        if stored is not None and stored.expression is not None:
            self._decide(stored.expression)
        if expression is not None:
            self._decide(expression)

    def refuses_new_set(self) -> bool:
        """Whether a `set` the set rules refuse is refused in this handler: call only when
        they do (in a handler, never in a query or validator)."""
        if self._set_rules is None:
            self._set_rules = workflow.patched(SET_RULES_PATCH)
        return self._set_rules

    def _decide(self, expression: str) -> None:
        if self._classic is None and cron.day_rule_matters(expression):
            self._classic = workflow.patched(CLASSIC_DAY_RULE_PATCH)
            if self._classic and self._builtin:
                crontab = self.crontab

                def revise(text: str, next_at: int) -> int | None:
                    return cron.classic_next_at(text, next_at, crontab_reading=crontab)

                self._core.revise_next_at(revise)
        if self._crontab is None and cron.crontab_reading_matters(expression):
            self._crontab = workflow.patched(CRONTAB_READING_PATCH)
            if self._crontab and self._builtin:
                self._core.revise_next_at(cron.crontab_next_at)
