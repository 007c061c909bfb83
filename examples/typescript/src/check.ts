/**
 * Run-time checks of query and update results against the types of ./wire.ts.
 *
 * TypeScript types vanish at run time, so a wire change (a renamed or retyped field) would
 * otherwise go unnoticed until some caller misbehaves. Each `Fields<T>` below must name every
 * field of its wire type (the compiler refuses a missing or extra one), so the checks cannot
 * drift from the types. Missing or mistyped fields are errors; fields the types do not know are
 * reported separately (the contract lets results grow, but then ./wire.ts is out of date).
 */
import {
  EnqueueResult,
  LedgerCounters,
  RunError,
  RunView,
  ScheduleView,
  Snapshot,
  SnapshotCounts,
  SnapshotOperation,
  SnapshotRequest,
  StopResolved,
  StopUnknown,
} from './wire';

export interface Report {
  errors: string[];
  unknown: string[];
}

export type Check = (value: unknown, path: string, report: Report) => void;

/** One check per field of T, optional fields included. */
export type Fields<T> = { [K in keyof Required<T>]-?: Check };

const is =
  (what: string, test: (value: unknown) => boolean): Check =>
  (value, path, report) => {
    if (!test(value)) report.errors.push(`${path} must be ${what}, got ${JSON.stringify(value)}`);
  };

export const int = is('an integer', (v) => Number.isSafeInteger(v));
export const str = is('a string', (v) => typeof v === 'string');
export const bool = is('a boolean', (v) => typeof v === 'boolean');
export const json: Check = () => undefined;
export const oneOf = <T extends string>(...values: T[]): Check =>
  is(`one of ${values.join(', ')}`, (v) => typeof v === 'string' && (values as string[]).includes(v));

export const nullable =
  (check: Check): Check =>
  (value, path, report) => {
    if (value !== null) check(value, path, report);
  };

export const arrayOf =
  (check: Check): Check =>
  (value, path, report) => {
    if (!Array.isArray(value)) {
      report.errors.push(`${path} must be an array, got ${JSON.stringify(value)}`);
      return;
    }
    value.forEach((item, index) => check(item, `${path}[${index}]`, report));
  };

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export const recordOf =
  (check: Check): Check =>
  (value, path, report) => {
    if (!isObject(value)) {
      report.errors.push(`${path} must be an object, got ${JSON.stringify(value)}`);
      return;
    }
    for (const [key, item] of Object.entries(value)) check(item, `${path}.${key}`, report);
  };

/** An object with these fields: all present unless listed in `optional`. */
export function object<T>(fields: Fields<T>, optional: (keyof T)[] = []): Check {
  return (value, path, report) => {
    if (!isObject(value)) {
      report.errors.push(`${path} must be an object, got ${JSON.stringify(value)}`);
      return;
    }
    for (const [key, check] of Object.entries(fields) as [string, Check][]) {
      if (key in value) check(value[key], `${path}.${key}`, report);
      else if (!(optional as string[]).includes(key)) report.errors.push(`${path}.${key} is missing`);
    }
    for (const key of Object.keys(value)) {
      if (!(key in fields)) report.unknown.push(`${path}.${key}`);
    }
  };
}

// -- the wire types' checks ---------------------------------------------------------------------

const runError = object<RunError>({ name: str, message: str });

export const scheduleView = object<ScheduleView>({
  expression: str,
  version: int,
  jitter_ms: int,
  next_at: nullable(int),
  params: recordOf(json),
});

export const runView = object<RunView>({
  scheduled_time: int,
  due_at: int,
  state: oneOf('queued', 'running', 'complete', 'errored'),
  attempt: int,
  error: nullable(runError),
});

export const enqueueResult = object<EnqueueResult>({
  accepted: arrayOf(str),
  duplicates: arrayOf(str),
  conflicts: arrayOf(str),
});

const operationPhase = oneOf('pending', 'dispatched', 'resolved', 'blocked');
const requestPhase = oneOf('frozen', 'in_flight', 'resolved', 'blocked');

const snapshotOperation = object<SnapshotOperation>({
  id: str,
  operation_type: str,
  sequence: int,
  phase: operationPhase,
  blockers: arrayOf(str),
  waiting_for: arrayOf(str),
  request_id: nullable(str),
  outcome: nullable(oneOf('applied', 'rejected', 'skipped')),
  error: nullable(str),
});

// `LastStatus`: the last answer, whole when small, so any field may appear (none is unknown).
const lastStatus = recordOf(json);

const snapshotRequest = object<SnapshotRequest>({
  id: str,
  operation_ids: arrayOf(str),
  phase: requestPhase,
  attempt: int,
  retry_at: nullable(int),
  retry_action: oneOf('submit', 'query'),
  canvas_ids: arrayOf(str),
  blocker: nullable(str),
  last_status: nullable(lastStatus),
  waiting: bool,
});

const stopResolved = object<StopResolved>({
  request_id: str,
  operation_ids: arrayOf(str),
  outcome: str,
});

const stopUnknown = object<StopUnknown>(
  {
    request_id: str,
    operation_ids: arrayOf(str),
    request: nullable(recordOf(json)),
    next_action: oneOf('submit', 'query'),
    attempt: int,
    last_status: nullable(lastStatus),
    at_stop: oneOf('accepted', 'unresolved', 'blocked', 'no_answer', 'not_asked'),
    request_left_out: bool,
  },
  ['request_left_out'],
);

const snapshotCounts = object<SnapshotCounts>({
  operations: recordOf(int),
  requests: recordOf(int),
  forgotten: int,
  resolved_total: int,
});

const ledgerCounters = object<LedgerCounters>({
  operations_enqueued: int,
  operations_resolved: recordOf(int),
  request_attempts: recordOf(int),
  requests_blocked: recordOf(int),
  completion_refusals: recordOf(int),
});

export const snapshot = object<Snapshot>({
  ledger_id: str,
  stopped: bool,
  held: bool,
  holds: int,
  hold_tokens: arrayOf(str),
  dropped_signals: int,
  signal_conflicts: int,
  counts: snapshotCounts,
  counters: ledgerCounters,
  operations: arrayOf(snapshotOperation),
  next_after: nullable(int),
  requests: arrayOf(snapshotRequest),
  claims: recordOf(str),
  resolved_at_stop: arrayOf(stopResolved),
  unknown: arrayOf(stopUnknown),
}, ['resolved_at_stop', 'unknown']);

/** Check `value` as `what`; errors throw, unknown fields are collected in `unknown`. */
export function expectShape<T>(check: Check, value: unknown, what: string, unknown: Set<string>): T {
  const report: Report = { errors: [], unknown: [] };
  check(value, what, report);
  for (const path of report.unknown) unknown.add(path.replace(/\[\d+\]/g, '[]'));
  if (report.errors.length > 0) throw new Error(`wire mismatch: ${report.errors.join('; ')}`);
  return value as T;
}
