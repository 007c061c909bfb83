/**
 * The wire contract of durability (docs/contract.md), written once in TypeScript.
 *
 * Every name and shape here is public: workflow types and IDs, start inputs, message payloads
 * and results, query results. JSON keys are snake_case; times are whole milliseconds since the
 * epoch, durations whole milliseconds in fields ending in `_ms`. Results may gain optional
 * fields within a version: read what you know, ignore the rest.
 *
 * Python sources of truth: workflows/schedule/models.py and core.py (`StoredSchedule`,
 * `Run.wire`), workflows/ledger/models.py and core.py (`snapshot`, `SnapshotQuery`).
 */

/** Any JSON value (`params`, `payload`): at most 64 levels deep. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

// -- 2. Schedule -------------------------------------------------------------------------------

export const SCHEDULE_WORKFLOW_TYPE = 'DurabilitySchedule';
export const scheduleWorkflowId = (objectId: string): string => `schedule:${objectId}`;
/** The run child of one occurrence (2.4); its idempotency key is `<object_id>:<scheduled_time>`. */
export const scheduledRunWorkflowId = (objectId: string, scheduledTime: number): string =>
  `schedule-run:${objectId}:${scheduledTime}`;

export type Overlap = 'queue' | 'skip' | 'buffer_one';

/** 2.1 `outcome_retries`: `max_attempts` counts the first attempt. */
export interface OutcomeRetries {
  max_attempts?: number;
  initial_interval_ms?: number;
  backoff_coefficient?: number;
  maximum_interval_ms?: number;
}

/** 2.1 Start input of `DurabilitySchedule`: all optional, read at the first start only. */
export interface ScheduleStartInput {
  /** Default: the workflow ID minus `schedule:`. */
  object_id?: string;
  max_concurrent_runs?: number;
  max_queued_runs?: number;
  overlap?: Overlap;
  run_timeout_ms?: number;
  run_heartbeat_timeout_ms?: number | null;
  outcome_timeout_ms?: number;
  outcome_retries?: OutcomeRetries;
  run_activity?: string;
  outcome_activity?: string;
  lifecycle_activity?: string | null;
  activity_task_queue?: string | null;
  // Who hosts the run activity; absent: "plugin" when activity_task_queue is null, else
  // "external". A TypeScript run worker is "external".
  run_host?: "plugin" | "external";
  // Bounds on the schedule's life (2.1), all off by default. A tick that fires more than
  // catchup_window_ms late is skipped (reason "catchup_window"); no tick before start_at nor
  // at/after end_at (epoch ms); remaining_runs counts the ticks that record a run down (read at
  // creation only); pause_on_failure pauses the schedule when a run settles "errored".
  catchup_window_ms?: number | null;
  start_at?: number | null;
  end_at?: number | null;
  remaining_runs?: number | null;
  pause_on_failure?: boolean;
}

/** 2.2 `pause` payload: `{}` or a note saying why (at most 1200 characters); the
 * `pause_note` query (a string, or `null`) shows it until `unpause`. */
export interface PausePayload {
  note?: string;
}

/** 2.2 `set` payload (signal and update; unknown fields are refused). */
export interface SetPayload {
  /** Cron, `@yearly`-style shorthand or `@every <duration>` (2.6); 1..500 characters. */
  expression: string;
  /** 0..2^53-1; stored only if higher than the stored one, tombstones included (S3). */
  version: number;
  /** A fixed jitter, or `{max_ms}` for one drawn once when the version is stored (S4). */
  jitter_ms?: number | { max_ms: number };
  /** At most 8 KiB as JSON; given to every run and outcome call of this version. */
  params?: JsonObject;
}

/** 2.2 `cancel` payload: `{}` ends the live schedule, `{version}` tombstones that version (S5). */
export interface CancelPayload {
  version?: number;
}

/** 2.2 `backfill` payload: a past range `[start_at, end_at)`. */
export interface BackfillPayload {
  start_at: number;
  end_at: number;
}

/** What the `set`/`cancel`/`trigger`/... updates return (2.2). */
export interface ScheduleUpdateResults {
  set: boolean; // the version was stored
  cancel: boolean; // a schedule was live
  pause: boolean;
  unpause: boolean;
  trigger: number; // the new run's scheduled_time
  backfill: number[]; // the scheduled_times recorded
}

/** 2.3 `get` query result; the query returns `null` if never set or cancelled. */
export interface ScheduleView {
  expression: string;
  version: number;
  /** The stored integer (the drawn one for `{max_ms}`). */
  jitter_ms: number;
  /** The next occurrence without jitter; `null` if there is none. */
  next_at: number | null;
  params: JsonObject;
}

export type RunState = 'queued' | 'running' | 'complete' | 'errored';

export interface RunError {
  name: string;
  message: string;
}

/** 2.3 One entry of the `runs` query: a run not yet acknowledged, by `scheduled_time`. */
export interface RunView {
  scheduled_time: number;
  due_at: number;
  state: RunState;
  /** 0 while queued, 1 once started. */
  attempt: number;
  error: RunError | null;
}

/** 2.8 Rejection `type`s of the schedule's updates. */
export type ScheduleRejection = 'InvalidRequest' | 'NoLiveSchedule' | 'NoRoomForRuns';

// -- 3. Operation ledger -----------------------------------------------------------------------

export const LEDGER_WORKFLOW_TYPE = 'OperationLedger';
export const ledgerWorkflowId = (ledgerId: string): string => `ledger:${ledgerId}`;
/** The request child of one frozen request (3.5). */
export const frozenRequestWorkflowId = (ledgerId: string, requestId: string): string =>
  `request:${ledgerId}:${requestId}`;

/** 3.1 Start input of `OperationLedger`: all optional, unknown fields refused, first start only. */
export interface LedgerStartInput {
  /** Default: the workflow ID minus `ledger:`. */
  ledger_id?: string;
  concurrency?: number;
  lanes?: { [operationType: string]: number };
  participant_free_types?: string[];
  supported_protocol_versions?: number[];
  retry?: {
    initial_interval_ms?: number;
    backoff_coefficient?: number;
    maximum_interval_ms?: number;
  };
  compile_activity?: string;
  submit_activity?: string;
  query_activity?: string;
  /** Called as (frozen_request, status) before a request resolves; null: no call (3.6). */
  complete_activity?: string | null;
  activity_task_queue?: string | null;
  retention?: { resolved_operations?: number; remembered_ids?: number };
}

/** 3.2 Operation intent (strict types; unknown fields are refused). */
export interface OperationIntent {
  /** 1..100 characters; a known ID is a duplicate (L2). */
  id: string;
  /** 1..100 characters. */
  operation_type: string;
  /** Canvases (L5): at most 64, each at most 100 characters. */
  participants?: string[];
  /** Operation IDs that must resolve first (L3): at most 64. */
  dependencies?: string[];
  /** At most 16 KiB as JSON. */
  payload?: Json;
  /** Must be an integer; default 1. */
  protocol_version?: number;
}

/** 3.3 `enqueue` payload: at most 100 operations and 128 KiB. */
export interface EnqueuePayload {
  operations: OperationIntent[];
}

/** 3.3 `enqueue` update result, once recorded. */
export interface EnqueueResult {
  accepted: string[];
  /** Known IDs sent with the intent recorded for them. */
  duplicates: string[];
  /** Known IDs sent with another intent: not recorded. */
  conflicts: string[];
}

/** 3.3 `skip` payload. */
export interface SkipPayload {
  operation_id: string;
  reason?: string;
}

export type OperationPhase = 'pending' | 'dispatched' | 'resolved' | 'blocked';
export type OperationOutcome = 'applied' | 'rejected' | 'skipped';
export type RequestPhase = 'frozen' | 'in_flight' | 'resolved' | 'blocked';
export type RequestAction = 'submit' | 'query';

/** 3.4 `snapshot` query argument (all optional; unknown fields fail the query). */
export interface SnapshotArgs {
  phase?: OperationPhase;
  /** The previous page's `next_after`. */
  after?: number;
  /** 1..300, default 200. */
  limit?: number;
}

export interface SnapshotOperation {
  id: string;
  operation_type: string;
  /** Its position in the ledger (L2), from 1. */
  sequence: number;
  phase: OperationPhase;
  blockers: string[];
  /** Dependencies not resolved yet (unknown IDs included), sorted; empty once dispatched. */
  waiting_for: string[];
  request_id: string | null;
  outcome: OperationOutcome | null;
  error: string | null;
}

/** A status answer as recorded: cut to a few fields and `"truncated": true` past 1 KiB. */
export interface LastStatus {
  outcome?: string;
  error?: string | null;
  retry_after_ms?: number | null;
  blocked?: boolean | null;
  truncated?: boolean;
  [other: string]: Json | undefined;
}

export interface SnapshotRequest {
  id: string;
  operation_ids: string[];
  phase: RequestPhase;
  attempt: number;
  retry_at: number | null;
  retry_action: RequestAction;
  canvas_ids: string[];
  blocker: string | null;
  last_status: LastStatus | null;
  /** In flight and waiting for its retry: it holds no slot (L4). */
  waiting: boolean;
}

/** Counts per phase list only the phases that have some. */
export interface SnapshotCounts {
  operations: Partial<Record<OperationPhase, number>>;
  requests: Partial<Record<RequestPhase, number>>;
  /** Resolved IDs remembered after leaving the state. */
  forgotten: number;
  /** Resolved since the ledger began. */
  resolved_total: number;
}

/**
 * What happened since the ledger's first run on 0.1.1 (not since a page): every map lists only
 * the kinds that happened, keyed by the ledger's own words.
 */
export interface LedgerCounters {
  operations_enqueued: number;
  /** By outcome: applied, rejected, skipped. */
  operations_resolved: Partial<Record<OperationOutcome, number>>;
  /** Submit and query calls by answer: applied, rejected, accepted, unresolved, blocked, transport, unknown. */
  request_attempts: { [answer: string]: number };
  /** Requests that became blocked, by kind of reason (far_side, completion, ...). */
  requests_blocked: { [kind: string]: number };
  /** `complete_activity` answers that blocked a resolution: refused, failed. */
  completion_refusals: { [kind: string]: number };
}

/** 3.4 `snapshot` query result (also what `stop` returns): one page of operations. */
export interface Snapshot {
  ledger_id: string;
  stopped: boolean;
  held: boolean;
  holds: number;
  /** The outstanding hold tokens, oldest first: `release` takes any of them (L12). */
  hold_tokens: string[];
  dropped_signals: number;
  /** IDs that `enqueue` signals sent with another intent than the recorded one. */
  signal_conflicts: number;
  counts: SnapshotCounts;
  counters: LedgerCounters;
  /** Oldest first (by `sequence`), at most `limit`. */
  operations: SnapshotOperation[];
  /** The `after` of the next page; `null` on the last page. */
  next_after: number | null;
  /** The requests of the operations on this page. */
  requests: SnapshotRequest[];
  /** `{canvas_id: request_id}`. */
  claims: { [canvasId: string]: string };
  /** `stop`'s result only: what its final queries resolved. */
  resolved_at_stop?: StopResolved[];
  /** `stop`'s result only: every request whose outcome may be unknown (3.10). */
  unknown?: StopUnknown[];
}

export interface StopResolved {
  request_id: string;
  operation_ids: string[];
  outcome: string;
}

/** What a stopped ledger could not learn: ask the far side by the body's idempotency key. */
export interface StopUnknown {
  request_id: string;
  operation_ids: string[];
  /** The frozen body; `null` with `request_left_out` once the list is large. */
  request: { [key: string]: Json } | null;
  next_action: RequestAction;
  attempt: number;
  last_status: LastStatus | null;
  at_stop: 'accepted' | 'unresolved' | 'blocked' | 'no_answer' | 'not_asked';
  request_left_out?: boolean;
}

/** 3.8 Rejection `type`s of the ledger's updates and query. */
export type LedgerRejection = 'InvalidRequest' | 'LedgerStopped';
