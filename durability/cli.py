"""`durability`: the command line for schedules and ledgers.

    durability schedule set acct-42 "@every 5m" --version 3 --params '{"plan": "pro"}'
    durability schedule get acct-42
    durability schedule runs acct-42 --json
    durability schedule describe acct-42 --runs 5 --next 3
    durability schedule list --query "DurabilityScheduleVersion >= 3"
    durability schedule pause --query "DurabilityObjectId STARTS_WITH 'acct-'" --dry-run
    durability ledger enqueue canvas-7 --file ops.json
    durability ledger snapshot canvas-7
    durability ledger skip canvas-7 op-3 --reason "client upgrade pending"

Connection settings come from Temporal's environment configuration (TEMPORAL_ADDRESS, ...).
`--json` and `--task-queue` go before or after the command. Tables show times in ISO 8601
UTC; `--json` keeps epoch milliseconds, as the workflows' wire contract has them.
Booleans print as sentences ("already paused"); `--json` prints the values as the
workflows answer them. Only `schedule set` and `ledger enqueue` create a workflow; any
other command on an ID with none says "no such schedule/ledger <id>", and on a closed one
says how it closed. Exit codes: 0 ok, 1 rejected, not found or closed, 2 bad usage or
settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durability.settings import ConfigurationError

# The Temporal client, the workflows' validators and OpenTelemetry are imported only by the
# commands that talk to Temporal (`run_command`): `--help`, a usage error or a bad JSON
# option answer without loading them.
if TYPE_CHECKING:
    from durability.client import DurabilityClient

Command = Callable[["DurabilityClient", argparse.Namespace], Coroutine[Any, Any, Any]]
Show = Callable[[Any, argparse.Namespace], str]


class UsageError(Exception):
    """Bad command-line input; the message names the option and the value."""


class NotDone(Exception):
    """The command printed its `result` and did not do all it was asked (exit code 1):
    a bulk command without `--yes`, or a batch job whose signals did not all arrive."""

    def __init__(self, result: Any, message: str) -> None:
        super().__init__(message)
        self.result = result


def iso(epoch_ms: Any) -> str:
    if not isinstance(epoch_ms, int):
        return "-" if epoch_ms is None else str(epoch_ms)
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")


# A number in a message that reads as epoch milliseconds of 2001..2999.
EPOCH_MS = re.compile(r"\b\d{13,14}\b")
EPOCH_MS_RANGE = range(10**12, 32_503_680_000_000)


def with_iso_times(message: str) -> str:
    """`message` with each epoch-ms time followed by its ISO 8601 UTC form."""

    def readable(match: re.Match[str]) -> str:
        value = int(match[0])
        return f"{value} ({iso(value)})" if value in EPOCH_MS_RANGE else match[0]

    return EPOCH_MS.sub(readable, message)


def cell(value: Any) -> str:
    """A table cell: lists joined by commas, objects as JSON, booleans as yes/no, None as `-`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(cell(item) for item in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def json_arg(option: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{option} must be JSON, got {text!r} ({error.msg})") from None


# -- schedule -------------------------------------------------------------------


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


# The commands that take `--query` instead of an object ID: one signal to every running
# schedule the query matches, sent by a Temporal batch job.
BULK_COMMANDS = ("pause", "unpause", "cancel", "configure")
BULK_OPTIONS = ("dry_run", "yes", "no_wait", "reason")


async def schedule_bulk(client: DurabilityClient, args: argparse.Namespace) -> Any:
    """Count the schedules `--query` matches (and list some); with `--yes`, start the batch
    job that signals them all and (unless `--no-wait`) wait for it."""
    from durability.client import bulk_payload, bulk_reason, schedule_query

    args.show = show_bulk
    version = getattr(args, "version", None)
    changes = args.set if args.command == "configure" else None
    note = getattr(args, "note", None)
    # Checked before anything is sent: the query, the payload and the reason.
    schedule_query(args.query)
    bulk_payload(args.command, version=version, changes=changes, note=note)
    try:
        reason = bulk_reason(default_reason(args.command) if args.reason is None else args.reason)
    except ValueError as error:
        raise UsageError(f"--{error}") from None
    matches = await client.match_schedules(args.query)
    result: dict[str, Any] = {
        "query": matches.query,
        "matched": matches.count,
        "object_ids": matches.object_ids,
        "job_id": None,
    }
    if args.dry_run or matches.count == 0:
        return result
    if not args.yes:
        raise NotDone(
            result,
            f"nothing sent: add --yes to {args.command} the {matches.count} schedule(s) "
            "--query matches (--dry-run lists them and sends nothing)",
        )
    job_id = await client.start_bulk(
        args.command, args.query, reason=reason, version=version, changes=changes, note=note
    )
    result["job_id"] = job_id
    job = await (client.bulk_job(job_id) if args.no_wait else client.wait_bulk_job(job_id))
    result["job"] = {
        "state": job.state, "matched": job.matched, "completed": job.completed,
        "failed": job.failed, "reason": job.reason,
    }  # fmt: skip
    if job.state == "failed" or job.failed:
        raise NotDone(
            result,
            f"batch job {job_id} {job.state}: {job.failed} of {job.matched} signal(s) failed "
            f"(a schedule that closed or continued as new meanwhile); the same command "
            f"again sends {args.command} to those still matching",
        )
    return result


def default_reason(command: str) -> str:
    """What a batch job records as its reason when `--reason` is not given."""
    import getpass

    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        user = "unknown user"
    return f"durability schedule {command} --query, by {user}"


def show_bulk(result: Any, args: argparse.Namespace) -> str:
    count, ids = result["matched"], result["object_ids"]
    listed = ", ".join(ids) + (f" (first {len(ids)})" if len(ids) < count else "")
    rows: list[tuple[str, Any]] = [
        ("query", result["query"]),
        ("matched", f"{count} running schedule(s)"),
        ("object_ids", listed or "-"),
    ]
    job = result.get("job")
    if job is None:
        why = "no schedule matches" if count == 0 else "dry run"
        return table(("field", "value"), rows) + f"\n\nnothing sent ({why})"
    rows += [
        ("job_id", result["job_id"]),
        ("state", job["state"]),
        ("signals", f"{job['matched']} matched, {job['completed']} completed, "
                    f"{job['failed']} failed"),
        ("reason", job["reason"]),
    ]  # fmt: skip
    text = table(("field", "value"), rows)
    if job["state"] == "running":
        text += (
            f"\n\nstill running: temporal batch describe --job-id {result['job_id']} "
            "shows its progress"
        )
    return text


async def schedule_trigger(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"scheduled_time": await client.trigger_schedule(args.object_id)}


async def schedule_backfill(client: DurabilityClient, args: argparse.Namespace) -> Any:
    times = await client.backfill_schedule(args.object_id, args.start, args.end)
    return {"recorded": times}


def epoch_ms(option: str) -> Callable[[str], int]:
    """Parse epoch milliseconds or an ISO 8601 time (UTC when no offset is given)."""

    def parse(text: str) -> int:
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} must be epoch ms or ISO 8601, got {text!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)

    return parse


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


async def ledger_list(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.list_ledgers(args.query, args.limit)


def show_listed(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "none found"
    if args.group == "ledger":  # version and next tick are the schedule's
        return table(
            ("id", "status", "operations", "started_at"),
            [(w["id"], w["status"], _counts(w["counts"]), iso(w["started_at"])) for w in result],
        )
    rows = [
        (
            w["id"],
            w["status"],
            w["state"],
            w["version"],
            iso(w["next_tick_at"]),
            iso(w["started_at"]),
        )
        for w in result
    ]
    return table(("id", "status", "state", "version", "next_tick_at", "started_at"), rows)


def _counts(counts: dict[str, int] | None) -> str | None:
    """A ledger's operations per phase as `3 pending, 2 resolved`; None (`-`) when unknown."""
    if counts is None:
        return None
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items())) or "none"


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
             _error_text((r.get("outcome") or {}).get("error")), r["delivery"])
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
    parts.append(_counters_table(result.get("counters") or {}, "counters since 0.1.1"))
    dropped = result.get("dropped_signals")
    if dropped is not None:
        parts.append(
            f"dropped signals: {dropped} (signals the schedule refused and logged: a bad "
            "payload, or a message it could not apply)"
        )
    return "\n\n".join(parts)


def _error_text(error: Any) -> str | None:
    if not isinstance(error, dict):
        return None
    return f"{error.get('name')}: {error.get('message')}"


def _counters_table(counters: dict[str, Any], heading: str) -> str:
    """Counters as a `heading` / value table; a counter by kind gets a row per kind."""
    rows: list[tuple[str, Any]] = []
    for name, value in counters.items():
        if isinstance(value, dict):
            rows.extend((f"{name}.{kind}", count) for kind, count in sorted(value.items()))
            if not value:
                rows.append((name, 0))
        else:
            rows.append((name, value))
    return table((heading, "value"), rows)


# -- ledger ---------------------------------------------------------------------


def read_operations(path: str) -> list[dict[str, Any]]:
    source = sys.stdin.read() if path == "-" else Path(path).read_text()
    data = json_arg("--file", source)
    operations = data.get("operations") if isinstance(data, dict) else data
    if not isinstance(operations, list):
        raise UsageError(
            "--file must hold a list of operations or an object with 'operations', "
            f"got {type(data).__name__}"
        )
    return operations


async def ledger_enqueue(client: DurabilityClient, args: argparse.Namespace) -> Any:
    operations, options = args.operations, args.options
    if args.signal:
        await client.signal_enqueue(args.ledger_id, operations, options=options, new=args.new)
        return {"signalled": True}
    return await client.enqueue(args.ledger_id, operations, options=options, new=args.new)


def show_enqueue(result: Any, args: argparse.Namespace) -> str:
    if "signalled" in result:
        return (
            f"signalled: {len(args.operations)} operation(s) (checked before sending; "
            "`snapshot` shows them once recorded)"
        )
    return table(
        ("field", "value"),
        [(field, result.get(field, [])) for field in ("accepted", "duplicates", "conflicts")],
    )


async def ledger_hold(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"token": await client.hold(args.ledger_id, args.token)}


async def ledger_release(client: DurabilityClient, args: argparse.Namespace) -> Any:
    await client.release(args.ledger_id, args.token)
    return {"released": args.token}


def show_release(result: Any, args: argparse.Namespace) -> str:
    return f"released {result['released']}"


async def ledger_settle(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.settle(args.ledger_id)


def show_settle(result: Any, args: argparse.Namespace) -> str:
    counts = result.get("counts", {})
    phases = ", ".join(f"{p} {n}" for p, n in counts.get("operations", {}).items())
    held = "held" if result.get("held") else "not held: launches go on"
    return (
        f"settled: no attempt in progress ({held}); "
        f"{result.get('waiting', 0)} requests waiting for their retry; "
        f"operations: {phases or 'none'}"
    )


async def ledger_resume(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"resumed": await client.resume(args.ledger_id)}


def show_resume(result: Any, args: argparse.Namespace) -> str:
    if not result["resumed"]:
        return "nothing to resume (no unresolved or blocked request)"
    return "resumed: " + ", ".join(result["resumed"])


async def ledger_skip(client: DurabilityClient, args: argparse.Namespace) -> Any:
    await client.skip(args.ledger_id, args.operation_id, args.reason)
    return {"skipped": args.operation_id}


def show_skip(result: Any, args: argparse.Namespace) -> str:
    return f"skipped {result['skipped']}"


async def ledger_stop(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.stop(
        args.ledger_id, query_limit=args.query_limit, query_deadline_ms=args.query_deadline_ms
    )


async def ledger_final(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.final_result(args.ledger_id)


def show_stop(result: Any, args: argparse.Namespace) -> str:
    """The final snapshot, then what the stop's queries resolved and what stays unknown."""
    parts = [show_snapshot(result, args)]
    resolved = result.get("resolved_at_stop") or []
    if resolved:
        rows = [
            (r.get("request_id"), ",".join(r.get("operation_ids") or []), r.get("outcome"))
            for r in resolved
        ]
        parts.append("resolved at stop:\n" + table(("request", "operations", "outcome"), rows))
    unknown = result.get("unknown")
    if unknown is None:  # a final result recorded before 0.1.1
        return "\n\n".join(parts)
    if not unknown:
        parts.append("unknown: none (every request sent was resolved, or never sent)")
        return "\n\n".join(parts)
    unknown_rows = [
        (u.get("request_id"), ",".join(u.get("operation_ids") or []), u.get("at_stop"),
         u.get("attempt"), u.get("next_action"),
         ((u.get("last_status") or {}).get("outcome")),
         (u.get("request") or {}).get("idempotency_key", "(body left out)"))
        for u in unknown
    ]  # fmt: skip
    parts.append(
        f"unknown: {len(unknown)} request(s) may have reached the far side and are not "
        "resolved; ask the far side about each by its idempotency key before enqueueing it "
        "again (--json prints each frozen body)\n"
        + table(
            ("request", "operations", "at_stop", "attempt", "next", "last", "key"), unknown_rows
        )
    )
    return "\n\n".join(parts)


async def ledger_snapshot(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.snapshot(
        args.ledger_id, phase=args.phase, after=args.after, limit=args.limit
    )


async def ledger_claims(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.claims(args.ledger_id)


def show_snapshot(result: Any, args: argparse.Namespace) -> str:
    operations = result.get("operations", [])
    rows = [
        (op.get("id"), op.get("phase"),
         ",".join(op.get("blockers") or []) or None,
         ",".join(op.get("waiting_for") or []) or None, op.get("request_id"), op.get("outcome"))
        for op in operations
    ]  # fmt: skip
    phase = getattr(args, "phase", None)
    columns = ("operation", "phase", "blockers", "waiting_for", "request", "outcome")
    if rows:
        parts = [table(columns, rows)]
    else:
        parts = [f"no operation in phase {phase}" if phase else "no operation"]
    counts = (result.get("counts") or {}).get("operations")
    if counts:
        summary = ", ".join(f"{phase} {count}" for phase, count in counts.items())
        more = result.get("next_after")
        parts.append(f"operations: {summary}" + (f"; next page: --after {more}" if more else ""))
    requests = result.get("requests", [])
    if requests:
        request_rows = [
            (rq.get("id"), rq.get("phase"), rq.get("attempt"), iso(rq.get("retry_at")),
             None if rq.get("phase") == "resolved" else rq.get("retry_action"),
             ",".join(rq.get("canvas_ids") or []))
            for rq in requests
        ]  # fmt: skip
        parts.append(
            table(("request", "phase", "attempt", "retry_at", "next", "canvases"), request_rows)
        )
    parts.append(table(("ledger", "value"), _ledger_rows(result)))
    counters = result.get("counters")
    if counters:
        parts.append(_counters_table(counters, "counters since 0.1.1"))
    return "\n\n".join(parts)


def _ledger_rows(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """Whether the ledger is held or stopped, its operations and requests per phase (blocked
    included), and the signals it dropped, as a snapshot reports them."""
    counts = result.get("counts") or {}
    holds = result.get("holds")
    held = result.get("held")
    held_text: str | None = None if held is None else "no"
    if held:
        held_text = f"yes: {holds} hold(s), nothing is launched until each token is released"
    rows: list[tuple[str, Any]] = [
        ("stopped", result.get("stopped")),
        ("held", held_text),
        ("operations", _phases(counts.get("operations"))),
        ("requests", _phases(counts.get("requests"))),
        ("dropped_signals", result.get("dropped_signals")),
    ]
    if result.get("signal_conflicts"):
        rows.append(("signal_conflicts", result["signal_conflicts"]))
    return rows


def _phases(counts: Any) -> str | None:
    """`2 blocked, 1 pending` from a count per phase; None (`-`) when not reported."""
    if not isinstance(counts, dict):
        return None
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items())) or "none"


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


async def ledger_configure(client: DurabilityClient, args: argparse.Namespace) -> Any:
    if args.signal:
        await client.signal_configure_ledger(args.ledger_id, args.set)
        return {"signalled": True}
    return await client.configure_ledger(args.ledger_id, args.set)


async def ledger_settings(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.ledger_settings(args.ledger_id)


def show_settings(result: Any, args: argparse.Namespace) -> str:
    if isinstance(result, dict) and "before" in result and "changes" in result:
        return show_dry_run(result, args)
    if result == {"signalled": True}:
        return "signalled: checked on the current settings; applied when the workflow takes it"
    return show_fields(result, args)


def show_claims(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "no canvas is claimed"
    return table(("canvas", "request"), sorted(result.items()))


def show_fields(result: Any, args: argparse.Namespace) -> str:
    return table(("field", "value"), [(k, v) for k, v in result.items()])


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


def show_dry_run(result: Any, args: argparse.Namespace) -> str:
    """A `--dry-run`'s answer: fire times before and after, then what else changes."""
    before, after = result["before"], result["after"]
    rows = [
        (iso(before[i]) if i < len(before) else "-", iso(after[i]) if i < len(after) else "-")
        for i in range(max(len(before), len(after)))
    ]
    parts = [table(("next before", "next after"), rows) if rows else "no fire time before or after"]
    if result.get("applied") is False:
        parts.append(f"not applied: version {args.version} is not above the stored version")
    changes = result.get("changes") or {}
    if changes:
        parts.append(table(("field", "before", "after"), [(k, *v) for k, v in changes.items()]))
    elif result.get("applied") is not False:
        parts.append("nothing else changes")
    parts.append("dry run: nothing was sent")
    return "\n\n".join(parts)


def preview_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--count must be an integer, got {text!r}") from None
    if not 1 <= value <= 50:
        raise argparse.ArgumentTypeError(f"--count must be in 1..50, got {value}")
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
    cmd.add_argument("--count", type=preview_count, default=10, help="how many (1..50, 10)")
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
            "--count", type=preview_count, default=10, help="with --dry-run: fire times shown"
        )


# -- parser ---------------------------------------------------------------------


NEW_HELP = (
    "start a new {what} if the ID's workflow is closed (it starts without the old one's "
    "state); without it a closed ID is refused"
)


def _global_options(suppress: bool) -> argparse.ArgumentParser:
    """`--json` and `--task-queue`, accepted before and after the command: the copies on
    the commands default to SUPPRESS so they never overwrite a value given before."""
    options = argparse.ArgumentParser(add_help=False)
    default: Any = argparse.SUPPRESS if suppress else False
    options.add_argument("--json", action="store_true", default=default, help="print JSON")
    options.add_argument(
        "--task-queue",
        default=argparse.SUPPRESS if suppress else None,
        help="task queue for new workflows (default: env)",
    )
    return options


def _add_list(commands: Any, run: Command, what: str) -> None:
    cmd = commands.add_parser("list", help=f"{what} found by visibility (running by default)")
    cmd.add_argument("--query", help="a visibility filter, e.g. \"ExecutionStatus = 'Completed'\"")
    cmd.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    cmd.set_defaults(run=run, show=show_listed)


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
LEDGER_COMMANDS: tuple[tuple[str, Command, Show, str], ...] = (
    ("enqueue", ledger_enqueue, show_enqueue,
     "enqueue operations from a JSON file (- for stdin); creates the ledger if none"),
    ("release", ledger_release, show_release, "release a hold token"),
    ("skip", ledger_skip, show_skip,
     "resolve a stuck (pending or blocked) operation as skipped"),
    ("hold", ledger_hold, show_fields, "stop new launches; prints a token"),
    ("resume", ledger_resume, show_resume, "retry unresolved and blocked requests"),
    ("settle", ledger_settle, show_settle,
     "wait until no attempt is in progress (after hold: quiet)"),
    ("stop", ledger_stop, show_stop,
     "stop the ledger, asking about requests sent; prints the final result"),
    ("final", ledger_final, show_stop,
     "a stopped ledger's final result: what stop resolved, what stays unknown"),
    ("snapshot", ledger_snapshot, show_snapshot, "operations and requests, a page"),
    ("claims", ledger_claims, show_claims, "which request holds each canvas"),
    ("configure", ledger_configure, show_settings,
     "change start settings in place; prints the settings in effect"),
    ("settings", ledger_settings, show_settings, "the start settings in effect"),
)  # fmt: skip


def _add_commands(
    group: Any,
    key: str,
    commands: Sequence[tuple[str, Command, Show, str]],
    key_optional: Sequence[str] = (),
) -> dict[str, argparse.ArgumentParser]:
    """Add `commands` to `group`, each with its positional `key` (which those named in
    `key_optional` may leave out); returns them by name."""
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, run, show, text in commands:
        parsers[name] = cmd = group.add_parser(name, help=text, description=text)
        what = "the schedule's object ID" if key == "object_id" else "the ledger's ID"
        cmd.add_argument(
            key,
            nargs="?" if name in key_optional else None,
            help=what + (" (or --query)" if name in key_optional else ""),
        )
        cmd.set_defaults(run=run, show=show)
    return parsers


def _add_configure(cmd: argparse.ArgumentParser, what: str, example: str) -> None:
    cmd.add_argument(
        "--set",
        required=True,
        help=f"JSON object of start fields to change, e.g. '{example}' (the others are kept)",
    )
    cmd.add_argument("--signal", action="store_true", help=f"signal the {what} instead")


def _add_bulk_options(cmd: argparse.ArgumentParser) -> None:
    """`--query` and what goes with it, on a command that then needs no object ID."""
    cmd.add_argument(
        "--query",
        help="instead of an object ID: every running schedule this visibility filter matches, "
        "e.g. \"DurabilityObjectId STARTS_WITH 'acct-'\" (a Temporal batch job signals them)",
    )
    cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="with --query: count and list, send nothing (configure with an object_id: print "
        "the next fire times before and after and the settings that change)",
    )
    cmd.add_argument(
        "--yes", action="store_true", help="with --query: start the batch job (else refused)"
    )
    cmd.add_argument(
        "--no-wait", action="store_true", help="with --query: return once the job started"
    )
    cmd.add_argument(
        "--reason", help="with --query: recorded on the batch job (default names the command)"
    )


def check_bulk_usage(args: argparse.Namespace) -> None:
    """A command of BULK_COMMANDS takes an object ID or `--query`, and the bulk options only
    with `--query`."""
    query = args.query
    if args.object_id is None and query is None:
        raise UsageError(f"schedule {args.command} needs an object_id or --query")
    if args.object_id is not None and query is not None:
        raise UsageError(
            f"give an object_id or --query, not both (got {args.object_id!r} and {query!r})"
        )
    if query is None:
        for option in BULK_OPTIONS:
            if option == "dry_run" and args.command == "configure":
                continue  # a preview of this schedule's configure
            if getattr(args, option) not in (None, False):
                flag = "--" + option.replace("_", "-")
                raise UsageError(f"{flag} goes with --query, not with an object_id")
        return
    if getattr(args, "signal", False):
        raise UsageError("--signal goes with an object_id: --query always sends signals")
    if args.dry_run and (args.yes or args.no_wait):
        flag = "--yes" if args.yes else "--no-wait"
        raise UsageError(f"--dry-run sends nothing: {flag} contradicts it")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durability", description=__doc__.split("\n")[0], parents=[_global_options(False)]
    )
    parser.add_argument(
        "--version", action="version", version=f"durability {package_version()}",
        help="print durability's version and exit",
    )  # fmt: skip
    common = _global_options(True)
    top = parser.add_subparsers(dest="group", required=True)

    class CommandParser(argparse.ArgumentParser):
        """Every command's parser also takes the global options."""

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("parents", [common])
            super().__init__(**kwargs)

    schedule = top.add_parser(
        "schedule", help="per-object recurring schedules", parents=[common]
    ).add_subparsers(dest="command", required=True, parser_class=CommandParser)
    _add_list(schedule, schedule_list, "schedules")
    commands = _add_commands(schedule, "object_id", SCHEDULE_COMMANDS, BULK_COMMANDS)
    for name in BULK_COMMANDS:
        _add_bulk_options(commands[name])
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
    _add_configure(commands["configure"], "schedule", '{"max_concurrent_runs": 3}')
    cmd = commands["describe"]
    cmd.add_argument("--runs", type=int, help="last runs that ended to show (0..10, default 10)")
    cmd.add_argument("--next", type=int, help="next fire times to show (0..50, default 10)")
    cmd = commands["redeliver"]
    cmd.add_argument("idempotency_key", help="the dead letter's key: <object_id>:<time>")
    cmd = commands["backfill"]
    times = "epoch ms or ISO 8601 (UTC unless an offset is given), e.g. 2026-01-05T09:00"
    cmd.add_argument("--start", type=epoch_ms("--start"), required=True, help=times)
    cmd.add_argument("--end", type=epoch_ms("--end"), required=True, help=times)

    ledger = top.add_parser(
        "ledger", help="durable operation ledgers", parents=[common]
    ).add_subparsers(dest="command", required=True, parser_class=CommandParser)
    _add_list(ledger, ledger_list, "ledgers")
    commands = _add_commands(ledger, "ledger_id", LEDGER_COMMANDS)
    cmd = commands["enqueue"]
    cmd.add_argument(
        "--file",
        required=True,
        help='JSON file of operations (a list, or {"operations": [...]}); - reads stdin',
    )
    cmd.add_argument(
        "--options",
        help="JSON start input (concurrency, lanes, ...), read only when this starts the ledger",
    )
    cmd.add_argument("--signal", action="store_true", help="signal-with-start instead")
    cmd.add_argument("--new", action="store_true", help=NEW_HELP.format(what="ledger"))
    commands["release"].add_argument("token", help="the token `hold` printed")
    _add_configure(commands["configure"], "ledger", '{"concurrency": 4}')
    cmd = commands["stop"]
    cmd.add_argument(
        "--query-limit", type=int, help="ask at most this many requests (0..100, default 100)"
    )
    cmd.add_argument(
        "--query-deadline-ms",
        type=int,
        help="stop asking after this long (0..60000, default 60000); 0 asks none",
    )
    commands["hold"].add_argument(
        "--token", help="your own token: holding it again changes nothing (default: a new one)"
    )
    cmd = commands["skip"]
    cmd.add_argument("operation_id", help="the operation to skip")
    cmd.add_argument("--reason", help='recorded as the operation\'s error (default "skipped")')
    cmd = commands["snapshot"]
    cmd.add_argument(
        "--phase",
        choices=("pending", "dispatched", "resolved", "blocked"),
        help="only the operations in this phase",
    )
    cmd.add_argument("--after", type=int, help="sequence: the previous page's next_after")
    cmd.add_argument("--limit", type=int, help="operations per page (1..300, default 200)")

    codec = top.add_parser(
        "codec-server",
        help="serve /decode for the Temporal UI and CLI (bearer token, allowed origins only)",
        description="Decode payloads for the Temporal UI and `temporal --codec-endpoint`. "
        "Keys from DURABILITY_ENCRYPTION_KEYS (or DURABILITY_ENCRYPTION_KEY); callers must "
        "send `Authorization: Bearer <token>` with the token from DURABILITY_CODEC_TOKEN "
        "or --token-file.",
    )
    codec.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    codec.add_argument(
        "--port", type=int, default=8081, help="port to listen on (default %(default)s)"
    )
    codec.add_argument(
        "--token-file", help="file holding the bearer token (instead of DURABILITY_CODEC_TOKEN)"
    )
    codec.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="a UI origin browsers may call from, e.g. https://temporal.example.com "
        "(repeatable; default DURABILITY_CODEC_ALLOWED_ORIGINS, else http://localhost:8233 "
        "and http://127.0.0.1:8233)",
    )
    codec.add_argument(
        "--enable-encode",
        action="store_true",
        help="also serve /encode (it lets its callers make payloads that workers accept)",
    )
    codec.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve without a token: anyone who reaches the port reads every payload "
        "(local use only)",
    )
    return parser


def run_codec_server(args: argparse.Namespace) -> int:
    """`durability codec-server`: check the keys, token and origins, then serve until
    Ctrl-C or SIGTERM."""
    import signal

    from durability.codec import KEY_ENV, KEYS_ENV, codec_from_env
    from durability.codec_server import (
        ORIGINS_ENV,
        TOKEN_ENV,
        CodecServerSettings,
        origins_from,
        start,
    )

    codec = codec_from_env()
    if codec is None:
        raise ConfigurationError(f"{KEY_ENV} is not set (nor {KEYS_ENV}): nothing to decode with")
    if args.token_file is not None:
        try:
            token: str | None = Path(args.token_file).read_text()
        except OSError as error:
            raise ConfigurationError(f"--token-file {args.token_file}: {error.strerror}") from None
        source = f"--token-file {args.token_file}"
    else:
        token = os.environ.get(TOKEN_ENV) or None
        source = TOKEN_ENV
    if token is not None and args.insecure_no_auth:
        raise UsageError(f"--insecure-no-auth and a token ({source}) contradict: give one")
    if token is None and not args.insecure_no_auth:
        raise ConfigurationError(
            f"no codec token: set {TOKEN_ENV} or pass --token-file PATH (callers send it as "
            "`Authorization: Bearer <token>`); --insecure-no-auth serves without one, for "
            "local use only"
        )
    settings = CodecServerSettings.build(
        token, origins_from(args.allow_origin, os.environ.get(ORIGINS_ENV)), args.enable_encode
    )

    async def serve() -> None:
        server = await start(codec, settings, args.host, args.port)
        print(f"codec server on {server.url}", flush=True)
        print(
            f"keys {', '.join(codec.key_ids)} (current {codec.key_id}); origins "
            f"{', '.join(sorted(settings.allowed_origins))}; /encode "
            f"{'enabled' if settings.enable_encode else 'disabled'}",
            flush=True,
        )
        if settings.token is None:
            print(
                f"durability: WARNING: --insecure-no-auth: anyone who can reach {server.url} "
                "can decrypt every payload; use it only on a machine of your own",
                file=sys.stderr,
                flush=True,
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
        finally:
            await server.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def parse_inputs(args: argparse.Namespace) -> None:
    """Check JSON options and files before anything is sent."""
    for option in ("params", "options", "set"):
        if hasattr(args, option):
            setattr(args, option, json_arg(f"--{option}", getattr(args, option)))
    if getattr(args, "group", None) == "schedule" and args.command in BULK_COMMANDS:
        check_bulk_usage(args)
    operation_id = getattr(args, "operation_id", None)
    if operation_id is not None and not operation_id.strip():
        raise UsageError(f"operation_id must not be empty, got {operation_id!r}")
    if getattr(args, "file", None) is not None:
        args.operations = read_operations(args.file)


class Interrupted(Exception):
    """Ctrl-C (SIGINT) stopped the command; the message says what was already sent."""


def interrupted_sentence(client: DurabilityClient | None) -> str:
    """What an interrupted command had already sent, as one line."""
    sent = [] if client is None else client.sent
    if not sent:
        return "interrupted: nothing was sent, nothing changed"
    last = sent[-1]
    if not last.answered:
        return (
            f"interrupted: {last.what} was sent and not answered yet: it may or may not take "
            "effect; read the state before sending it again"
        )
    return f"interrupted: {last.what} was sent" + (f"; {last.means}" if last.means else "")


async def execute(args: argparse.Namespace) -> Any:
    """Connect and run the command. SIGINT cancels it and raises Interrupted, saying what
    was already sent (the SDK turns a cancelled call into errors of its own)."""
    import signal

    from durability.client import DurabilityClient
    from durability.tracing import configure_tracing

    if getattr(args, "offline", False):
        return await args.run(None, args)
    loop = asyncio.get_running_loop()
    command = asyncio.current_task()
    stopped = False
    client: DurabilityClient | None = None

    def interrupt() -> None:
        nonlocal stopped
        stopped = True
        if command is not None:
            command.cancel()

    with contextlib.suppress(NotImplementedError):  # no signal handlers on this platform
        loop.add_signal_handler(signal.SIGINT, interrupt)
    tracing = configure_tracing("durability-cli")
    try:
        # Without an exporter a span goes nowhere: no interceptor, and no import of it.
        client = await DurabilityClient.connect(args.task_queue, tracing=tracing is not None)
        return await args.run(client, args)
    except BaseException as error:
        if stopped:
            raise Interrupted(interrupted_sentence(client)) from error
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if tracing is not None:
            tracing.shutdown()  # send this command's spans before the process leaves


def package_version() -> str:
    """The installed durability's version (`durability --version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("durability")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def fail(message: str, code: int) -> int:
    """Print `message` as the command's one-line error; returns `code`."""
    one_line = " ".join(line.strip() for line in message.splitlines() if line.strip())
    print(f"durability: {with_iso_times(one_line)}", file=sys.stderr)
    return code


# The exit code of a command stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while parsing or importing: nothing was sent
        return fail("interrupted: nothing was sent, nothing changed", INTERRUPTED)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.group == "codec-server":
            return run_codec_server(args)
        parse_inputs(args)
    except (UsageError, ConfigurationError, ValueError, OSError) as error:
        return fail(str(error), 2)
    except Exception as error:  # never a traceback: one line naming what went wrong
        return fail(f"{type(error).__name__}: {error}", 1)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run a schedule or ledger command against Temporal and print its result; returns the
    exit code."""
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    from durability.client import (
        BatchBusyError,
        ClosedError,
        InvalidQueryError,
        NotFoundError,
        RejectedError,
        UnansweredError,
    )
    from durability.errors import NoWorkerError

    try:
        result = asyncio.run(execute(args))
    except Interrupted as error:
        return fail(str(error), INTERRUPTED)
    except KeyboardInterrupt:  # before the command's loop ran: nothing was sent
        return fail("interrupted: nothing was sent, nothing changed", INTERRUPTED)
    except NoWorkerError as error:
        return fail(str(error), 1)
    except UnansweredError as error:  # a TimeoutError, so an OSError: before that clause
        return fail(str(error), 1)
    except InvalidQueryError as error:  # a ValueError: before that clause
        return fail(f"--query {error.query!r:.300} refused: {error.reason}; nothing sent", 1)
    except NotDone as error:
        show(error.result, args)
        return fail(str(error), 1)
    except BatchBusyError as error:
        return fail(str(error), 1)
    except (UsageError, ConfigurationError, ValueError, OSError) as error:
        return fail(str(error), 2)
    except RejectedError as error:
        return fail(f"{error.update} rejected by {error.workflow_id}: {error}", 1)
    except ClosedError as error:  # LedgerStopped included: its sentence names `--new`
        return fail(error.sentence("--new"), 1)
    except NotFoundError as error:
        return fail(str(error), 1)
    except WorkflowQueryFailedError as error:
        return fail(f"{args.command} failed on the worker: {error}", 1)
    except RPCError as error:  # the server refused the call itself (a bad --query, ...)
        return fail(f"Temporal refused the call: {error.message}", 1)
    except Exception as error:  # never a traceback: one line naming what went wrong
        return fail(f"{type(error).__name__}: {error}", 1)
    show(result, args)
    return 0


def show(result: Any, args: argparse.Namespace) -> None:
    """Print a command's result: JSON with `--json`, else its table or sentence."""
    text = json.dumps(result, indent=2, sort_keys=True) if args.json else args.show(result, args)
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head` stopped reading: not an error of the command
        pass


def entrypoint() -> None:
    """Console-script entry: run, flush, and leave without interpreter finalization.

    Temporal's Rust core keeps threads that may call into Python while the interpreter
    finalizes, which can abort a short-lived process after its work is done; the CLI's
    output is already written, so it exits directly with its code.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
