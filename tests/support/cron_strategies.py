"""Hypothesis strategies for cron expressions every form crontab(5) allows, in zones with
half-hour offsets and daylight saving, with start times near their changes of offset: what
`test_schedule_cron_classic.py` and `tests/schedule/cron_widened_check.py` draw from."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

from tests.support.cron_model import DAY_NAMES, MACROS, MINUTE, MONTH_NAMES

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Europe/London",
    "Australia/Sydney",
    "America/St_Johns",
    "America/Santiago",
    "Asia/Kolkata",
    "Australia/Lord_Howe",  # a 30-minute change of offset
    "Australia/Adelaide",  # a half-hour offset that changes by an hour
]


# --- expressions, zones and start times ---


def _number(
    draw: st.DrawFn, low: int, high: int, names: list[str] | None, first: int
) -> tuple[int, str]:
    """A value in [low, high], sometimes by name (`names[0]` is the value `first`)."""
    value = draw(st.integers(low, high))
    if names and value - first < len(names) and draw(st.integers(0, 3)) == 0:
        name = names[value - first]
        return value, draw(st.sampled_from([name, name.upper(), name.title()]))
    return value, str(value)


@st.composite
def field(
    draw: st.DrawFn, low: int, high: int, names: list[str] | None = None, favoured: int = 0
) -> str:
    """`*`, or a list of 1-3 items, each `*`, `*/n`, `v`, `v/n`, `a-b` or `a-b/n`, where a
    range may have equal ends (`9-9`), values may be names, and `*` may stand anywhere."""
    kind = draw(st.integers(0, 9))
    if kind < 3:
        return "*"
    items: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(
            st.sampled_from(["step", "value", "value-step", "range", "range-step", "star"])
        )
        span = high - low + 1
        if shape == "star":
            items.append("*")
        elif shape == "step":
            items.append(f"*/{draw(st.integers(1, span))}")
        elif shape == "value":
            if favoured and draw(st.booleans()):
                items.append(str(draw(st.integers(low, min(high, low + favoured)))))
            else:
                items.append(_number(draw, low, high, names, low)[1])
        elif shape == "value-step":
            value = _number(draw, low, high, names, low)[1]
            items.append(f"{value}/{draw(st.integers(1, span))}")
        else:
            # a <= b, equal ends often: crontab reads `9-9` as 9.
            a, a_text = _number(draw, low, high, names, low)
            b_text = a_text if draw(st.booleans()) else _number(draw, a, high, names, low)[1]
            step = f"/{draw(st.integers(1, span))}" if shape == "range-step" else ""
            items.append(f"{a_text}-{b_text}{step}")
    return ",".join(items)


@st.composite
def expressions(draw: st.DrawFn, zone: str) -> str:
    """A random 5- or 6-field expression, on `zone` (UTC is sometimes left implicit)."""
    fields = [
        draw(field(0, 59)),
        # Hours near the small hours, where daylight saving moves the clock, are favoured.
        draw(field(0, 23, favoured=4)),
        draw(field(1, 31)),
        draw(field(1, 12, MONTH_NAMES)),
        draw(field(0, 7, DAY_NAMES)),
    ]
    if draw(st.booleans()):
        fields.insert(0, draw(field(0, 59)))
    body = " ".join(fields)
    if draw(st.integers(0, 9)) == 0:
        body = draw(st.sampled_from(sorted(MACROS)))
        body = draw(st.sampled_from([body, body.upper()]))
    if zone == "UTC" and draw(st.booleans()):
        return body
    return f"CRON_TZ={zone} {body}"


@functools.cache
def transitions(zone_name: str) -> list[int]:
    """The epoch seconds at which `zone_name` changes its offset, 2000-2040."""
    zone = ZoneInfo(zone_name)
    found: list[int] = []
    step = 6 * 3600
    moment = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2040, 1, 1, tzinfo=UTC).timestamp())
    offset = datetime.fromtimestamp(moment, zone).utcoffset()
    while moment < end:
        following = datetime.fromtimestamp(moment + step, zone).utcoffset()
        if following != offset:
            change = moment + MINUTE
            while datetime.fromtimestamp(change, zone).utcoffset() == offset:
                change += MINUTE
            found.append(change)
            offset = following
        moment += step
    return found


@st.composite
def starts(draw: st.DrawFn, zone: str) -> int:
    """Epoch ms: anywhere in 2000-2040, or shortly before a change of offset (within
    minutes, hours or a day and a half, so dense and sparse expressions meet it)."""
    changes = transitions(zone)
    near_a_change: bool = draw(st.booleans())
    if changes and near_a_change:
        moment = draw(st.sampled_from(changes)) * 1000
        before = draw(st.sampled_from([10 * 60_000, 3 * 3_600_000, 36 * 3_600_000]))
        return moment + draw(st.integers(-before, before // 10))
    low = int(datetime(2000, 1, 1, tzinfo=UTC).timestamp() * 1000)
    high = int(datetime(2040, 1, 1, tzinfo=UTC).timestamp() * 1000)
    return draw(st.integers(low, high))


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, int]:
    zone = draw(st.sampled_from(ZONES))
    return draw(expressions(zone)), draw(starts(zone))
