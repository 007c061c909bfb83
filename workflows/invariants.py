"""The seeds' promises as executable predicates over a core's state and the effects it asked for.

Pure (no Temporal import). Each check returns the violations it finds (an empty list when the
rule holds), each naming its rule (S1-S14, L1-L14). The simulations in `tests/simulation/`
call them after every transition; anything else that holds a core's state may call them too.
A new promise is a new predicate here, listed in its capability's `*_CHECKS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One broken promise: the rule's number and what was seen."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


# ============================================================================ schedule (S1-S14)
# Predicates over the schedule core's state and effects.


# ============================================================================ ledger (L1-L14)
# Predicates over the ledger core's state and effects.
