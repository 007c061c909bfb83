"""The `durability schedule` commands: what each runs and how a table shows its result."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from durability.cli_bounds import DESCRIBE_NEXT, DESCRIBE_RUNS, PREVIEW_COUNT
from durability.cli_bulk import BULK_COMMANDS, add_bulk_options, schedule_bulk
from durability.cli_common import (
    NEW_HELP,
    Command,
    Show,
    add_configure,
    counters_table,
    epoch_ms,
    error_text,
    iso,
    json_arg,
    show_dry_run,
    show_settings,
    table,
)

if TYPE_CHECKING:
    from durability.client import DurabilityClient


async def schedule_set(client: DurabilityClient, args: argparse.Namespace) -> Any:
    schedule = (args.object_id, args.expression, args.version)
    if args.dry_run:
        return await client.preview_set_schedule(
            *schedule, jitter_ms=args.jitter_ms, jitter_max_ms=args.jitter_max_ms,
            params=args.params, count=args.count,
        )  # fmt: skip
    settings: dict[str, Any] = {
        "jitter_ms": args.jitter_ms, "jitter_max_ms": args.jitter_max_ms,
        "params": args.params, "options": args.options,
    }  # fmt: skip
    if args.signal:
        await client.signal_set_schedule(*schedule, **settings, new=args.new)
        return {"signalled": True}
    applied = await client.set_schedule(*schedule, **settings, new=args.new)
    if not applied and not args.json:  # a person is told which version is stored
        args.stored_version = await client.stored_version(args.object_id)
        args.stored_is_live = await client.get_schedule(args.object_id) is not None
    return {"applied": applied}


def show_set(result: Any, args: argparse.Namespace) -> str:
    if "before" in result:
        return show_dry_run(result, args)
    if "signalled" in result:
        return (
            f"signalled: version {args.version} (checked before sending; `get` shows it once "
            "applied)"
        )
    if result["applied"]:
        return f"applied: version {args.version} is stored"
    stored = getattr(args, "stored_version", None)
    if stored is None:
        return (
            f"not applied: version {args.version} is not above the version already stored "
            "(a cancelled one included)"
        )
    state = "live" if getattr(args, "stored_is_live", False) else "cancelled"
    return f"not applied: version {args.version} is not above the stored version {stored} ({state})"


async def schedule_cancel(client: DurabilityClient, args: argparse.Namespace) -> Any:
    if args.query is not None:
        return await schedule_bulk(client, args)
    if args.signal:
        await client.signal_cancel_schedule(args.object_id, args.version)
        return {"signalled": True}
    live = await client.cancel_schedule(args.object_id, args.version)
    if not live and args.version is not None and not args.json:
        # A cancel of a version below the stored one changes nothing: say which is stored.
        args.stored_version = await client.stored_version(args.object_id)
        if args.stored_version is not None and args.stored_version > args.version:
            args.stored_is_live = await client.get_schedule(args.object_id) is not None
    return {"live": live}


async def schedule_close(client: DurabilityClient, args: argparse.Namespace) -> Any:
    await client.close_schedule(args.object_id, wait=args.wait)
    return {"closed": args.wait, "cancellation_requested": True}


def show_close(result: Any, args: argparse.Namespace) -> str:
    if result["closed"]:
        return f"closed: schedule {args.object_id} ended as cancelled, its runs reported"
    return (
        f"closing: schedule {args.object_id} starts no run and closes once the runs it "
        "started have reported (--wait waits for it)"
    )


def show_cancel(result: Any, args: argparse.Namespace) -> str:
    if "signalled" in result:
        return "signalled: cancel (checked before sending; `get` shows it once applied)"
    if result["live"]:
        return "cancelled; it was live"
    if args.version is not None:
        stored = getattr(args, "stored_version", None)
        if stored is not None and stored > args.version:
            state = "live" if getattr(args, "stored_is_live", False) else "cancelled"
            return (
                f"nothing changed: version {stored} is stored ({state}), higher than "
                f"{args.version}; a cancel of a lower version is ignored"
            )
        return (
            f"nothing was live: version {args.version} is stored as cancelled (a tombstone: "
            f"a set of version {args.version} or lower is not applied)"
        )
    return "cancelled; nothing was live (already cancelled, or never set)"


def show_pause(result: Any, args: argparse.Namespace) -> str:
    return "paused" if result["paused"] else "already paused"


def show_unpause(result: Any, args: argparse.Namespace) -> str:
    return "unpaused: ticking again from now" if result["unpaused"] else "was not paused"


async def schedule_pause(client: DurabilityClient, args: argparse.Namespace) -> Any:
    if args.query is not None:
        return await schedule_bulk(client, args)
    return {"paused": await client.pause_schedule(args.object_id, args.note)}


async def schedule_unpause(client: DurabilityClient, args: argparse.Namespace) -> Any:
    if args.query is not None:
        return await schedule_bulk(client, args)
    return {"unpaused": await client.unpause_schedule(args.object_id)}


async def schedule_trigger(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"scheduled_time": await client.trigger_schedule(args.object_id)}


async def schedule_backfill(client: DurabilityClient, args: argparse.Namespace) -> Any:
    times = await client.backfill_schedule(args.object_id, args.start, args.end)
    return {"recorded": times}


def show_trigger(result: Any, args: argparse.Namespace) -> str:
    return table(("field", "value"), [("scheduled_time", iso(result["scheduled_time"]))])


def show_backfill(result: Any, args: argparse.Namespace) -> str:
    if not result["recorded"]:
        return (
            "no run recorded: the expression has no occurrence in the range (within the "
            "schedule's start_at/end_at) that is not already recorded"
        )
    return table(("recorded scheduled_time",), [(iso(t),) for t in result["recorded"]])


async def schedule_dead_letters(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.dead_letters(args.object_id)


async def schedule_redeliver(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"redelivering": await client.redeliver(args.object_id, args.idempotency_key)}


def show_redeliver(result: Any, args: argparse.Namespace) -> str:
    return f"redelivering {args.idempotency_key}"


def show_dead_letters(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "no dead letters"
    rows = [
        (d["idempotency_key"], iso(d["scheduled_time"]), d["outcome"]["status"],
         f"{d['error']['name']}: {d['error']['message']}", d["redelivering"])
        for d in result
    ]  # fmt: skip
    return table(("idempotency_key", "scheduled_time", "outcome", "error", "redelivering"), rows)


async def schedule_list(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.list_schedules(args.query, args.limit)


async def schedule_get(client: DurabilityClient, args: argparse.Namespace) -> Any:
    view = await client.get_schedule(args.object_id)
    if view is None and not args.json:  # a person is told whether it was cancelled
        args.stored_version = await client.stored_version(args.object_id)
    return view


async def schedule_runs(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.list_runs(args.object_id)


def show_schedule(result: Any, args: argparse.Namespace) -> str:
    if result is None:
        version = getattr(args, "stored_version", None)
        if version is None:
            return "no live schedule: none set yet"
        return f"no live schedule: version {version} is cancelled"
    rows = [
        ("expression", result["expression"]),
        ("version", result["version"]),
        ("jitter_ms", result["jitter_ms"]),
        ("next_at", iso(result["next_at"])),
        ("params", json.dumps(result.get("params", {}))),
        ("paused", bool(result.get("paused"))),
    ]
    if result.get("pause_note") is not None:
        rows.append(("pause_note", result["pause_note"]))
    if result.get("closing"):
        rows.append(("closing", "yes: cancellation requested; nothing sent to it now lasts"))
    return table(("field", "value"), rows)


def show_runs(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "no runs awaiting acknowledgement"
    rows = [
        (iso(r["scheduled_time"]), iso(r["due_at"]), r["state"], r["attempt"],
         (r.get("error") or {}).get("name") if isinstance(r.get("error"), dict) else r.get("error"))
        for r in result
    ]  # fmt: skip
    return table(("scheduled_time", "due_at", "state", "attempt", "error"), rows)


async def schedule_describe(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.describe(args.object_id, runs=args.runs, next_times=args.next)


def show_describe(result: Any, args: argparse.Namespace) -> str:
    """The schedule, the last runs that ended, the next fire times and the counters."""
    schedule = result.get("schedule")
    paused, note = result.get("paused"), result.get("pause_note")
    if schedule is None:
        head = "no live schedule (never set, or cancelled)" + ("; paused" if paused else "")
        parts = [head + (f": {note}" if note is not None else "")]
    else:
        closing = result.get("closing")
        parts = [
            show_schedule(
                {**schedule, "paused": paused, "pause_note": note, "closing": closing}, args
            )
        ]
    recent = result.get("recent_runs") or []
    if recent:
        rows = [
            (iso(r["scheduled_time"]), iso(r.get("started_at")), iso(r.get("ended_at")),
             (r.get("outcome") or {}).get("status", "unreported"),
             error_text((r.get("outcome") or {}).get("error")), r["delivery"])
            for r in recent
        ]  # fmt: skip
        parts.append(
            table(("ended run", "started_at", "ended_at", "outcome", "error", "delivery"), rows)
        )
    else:
        parts.append("no run has ended yet")
    upcoming = result.get("next_fire_times") or []
    dst = result.get("dst_policy")
    if dst is not None:
        parts.append(f"daylight saving: {dst['nonexistent']} a skipped time, "
                     f"{dst['ambiguous']} of a repeated one")  # fmt: skip
    if result.get("remaining_runs") is not None:
        parts.append(f"remaining runs {result['remaining_runs']}")
    if upcoming:
        parts.append(table(("next fire time",), [(iso(t),) for t in upcoming]))
    else:
        parts.append("no upcoming fire time")
    parts.append(counters_table(result.get("counters") or {}, "counters"))
    dropped = result.get("dropped_signals")
    if dropped is not None:
        parts.append(
            f"dropped signals: {dropped} (signals the schedule refused and logged: a bad "
            "payload, or a message it could not apply)"
        )
    return "\n\n".join(parts)


async def schedule_configure(client: DurabilityClient, args: argparse.Namespace) -> Any:
    if args.query is not None:
        return await schedule_bulk(client, args)
    if args.dry_run:
        return await client.preview_configure_schedule(args.object_id, args.set, count=args.count)
    if args.signal:
        await client.signal_configure_schedule(args.object_id, args.set)
        return {"signalled": True}
    return await client.configure_schedule(args.object_id, args.set)


async def schedule_settings(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.schedule_settings(args.object_id)


async def schedule_preview(client: DurabilityClient | None, args: argparse.Namespace) -> Any:
    from durability.client import preview_schedule

    return preview_schedule(
        args.expression,
        after_ms=args.after,
        count=args.count,
        jitter_ms=args.jitter_ms,
        dst_policy=json_arg("--dst-policy", args.dst_policy),
    )


def show_preview(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "no fire time (nothing was created)"
    return "\n".join(iso(at) for at in result)


def preview_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--count must be an integer, got {text!r}") from None
    low, high = PREVIEW_COUNT.low, PREVIEW_COUNT.high
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"--count must be in {low}..{high}, got {value}")
    return value


def _add_preview(schedule: Any, commands: dict[str, argparse.ArgumentParser]) -> None:
    """`schedule preview` (computed here, nothing sent) and `--dry-run` of `set`."""
    cmd = schedule.add_parser(
        "preview", help="the next fire times of an expression; creates and sends nothing"
    )
    cmd.add_argument("expression", help='cron, "@hourly", "@every 5m", "CRON_TZ=... 0 9 * * *"')
    cmd.add_argument(
        "--after",
        type=epoch_ms("--after"),
        help="from this time (epoch ms or ISO 8601, UTC unless an offset is given; default now)",
    )
    count = PREVIEW_COUNT
    cmd.add_argument(
        "--count",
        type=preview_count,
        default=count.default,
        help=f"how many ({count.low}..{count.high}, {count.default})",
    )
    cmd.add_argument("--jitter-ms", type=int, default=0, help="a fixed jitter added to each")
    cmd.add_argument(
        "--dst-policy",
        help='the start field dst_policy, e.g. \'{"nonexistent": "skip", "ambiguous": "both"}\'',
    )
    cmd.set_defaults(run=schedule_preview, show=show_preview, offline=True)
    commands["set"].add_argument(
        "--dry-run",
        action="store_true",
        help="print the next fire times before and after and what else changes; send nothing",
    )
    for name in ("set", "configure"):
        commands[name].add_argument(
            "--count",
            type=preview_count,
            default=PREVIEW_COUNT.default,
            help="with --dry-run: fire times shown",
        )


# Each group's commands but `list`, in the order `--help` shows them: (name, what it runs,
# how a table shows its result, help). Each takes the group's ID first; build_parser adds
# the other arguments of those that have more.
SCHEDULE_COMMANDS: tuple[tuple[str, Command, Show, str], ...] = (
    ("set", schedule_set, show_set, "set a schedule version (creates the schedule if none)"),
    ("cancel", schedule_cancel, show_cancel, "cancel future ticks"),
    ("get", schedule_get, show_schedule, "the stored schedule"),
    ("runs", schedule_runs, show_runs, "runs not yet acknowledged"),
    ("describe", schedule_describe, show_describe,
     "the schedule, its last runs, next fire times and counters"),
    ("pause", schedule_pause, show_pause, "stop ticks (recorded runs go on)"),
    ("unpause", schedule_unpause, show_unpause, "tick again from now"),
    ("trigger", schedule_trigger, show_trigger, "record a run now"),
    ("dead-letters", schedule_dead_letters, show_dead_letters,
     "outcomes whose delivery was given up"),
    ("redeliver", schedule_redeliver, show_redeliver, "deliver a dead-lettered outcome again"),
    ("backfill", schedule_backfill, show_backfill, "record runs for a past range [start, end)"),
    ("close", schedule_close, show_close,
     "end the schedule for good, once its running runs have reported"),
    ("configure", schedule_configure, show_settings,
     "change start settings in place; prints the settings in effect"),
    ("settings", schedule_settings, show_settings, "the start settings in effect"),
)  # fmt: skip


def add_schedule_arguments(schedule: Any, commands: dict[str, argparse.ArgumentParser]) -> None:
    """The arguments of the schedule's commands beyond the object ID, and `preview`."""
    for name in BULK_COMMANDS:
        add_bulk_options(commands[name])
    _add_preview(schedule, commands)
    cmd = commands["set"]
    cmd.add_argument(
        "expression", help='cron, "@hourly", "@every 5m", "CRON_TZ=Europe/Paris 0 9 * * *"'
    )
    cmd.add_argument(
        "--version",
        type=int,
        required=True,
        help="the schedule's version: applied only when above the version stored",
    )
    jitter = cmd.add_mutually_exclusive_group()
    jitter.add_argument("--jitter-ms", type=int, help="delay every tick by this many ms")
    jitter.add_argument("--jitter-max-ms", type=int, help="pick the jitter once in [0, max]")
    cmd.add_argument("--params", help="JSON object handed to every run")
    cmd.add_argument(
        "--options",
        help="JSON start input (max_concurrent_runs, ...), read only when this starts the schedule",
    )
    cmd.add_argument("--signal", action="store_true", help="signal-with-start instead")
    cmd.add_argument("--new", action="store_true", help=NEW_HELP.format(what="schedule"))
    cmd = commands["cancel"]
    cmd.add_argument(
        "--version",
        type=int,
        help="cancel as this version: stored as cancelled unless a higher one is stored "
        "(default: whatever version is live)",
    )
    cmd.add_argument("--signal", action="store_true", help="send a signal instead of an update")
    cmd = commands["pause"]
    cmd.add_argument("--note", help="why it is paused (shown by get; unpause clears it)")
    cmd = commands["close"]
    cmd.add_argument("--wait", action="store_true", help="return once the schedule has closed")
    add_configure(commands["configure"], "schedule", '{"max_concurrent_runs": 3}')
    cmd = commands["describe"]
    cmd.add_argument(
        "--runs", type=int, help=f"last runs that ended to show ({DESCRIBE_RUNS.text})"
    )
    cmd.add_argument("--next", type=int, help=f"next fire times to show ({DESCRIBE_NEXT.text})")
    cmd = commands["redeliver"]
    cmd.add_argument("idempotency_key", help="the dead letter's key: <object_id>:<time>")
    cmd = commands["backfill"]
    times = "epoch ms or ISO 8601 (UTC unless an offset is given), e.g. 2026-01-05T09:00"
    cmd.add_argument("--start", type=epoch_ms("--start"), required=True, help=times)
    cmd.add_argument("--end", type=epoch_ms("--end"), required=True, help=times)
