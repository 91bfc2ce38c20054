// Scheduled compaction: the Cron Trigger runs what `d1saver compact --keep N --all [--max-age
// Dd]` runs, on the D1 bindings, with the same statements (compaction.generated.js, generated
// from d1saver's catalogue by `d1saver gateway build`), the same lease, the same plan (the
// database plans each page: which threads, in which batches) and the same end (leftovers of
// killed copies and moves removed, expired memory and cache entries swept, by the database's
// clock). One policy: compaction/job.py drives it from Python, this file from the Worker.
//
// Settings, from wrangler.toml's [vars] (or .dev.vars, the dashboard; numbers or strings):
//   COMPACTION_KEEP          checkpoints kept per thread and subgraph namespace (--keep), >= 1
//   COMPACTION_MAX_AGE_DAYS  optional: threads idle longer lose all but their tags (--max-age Nd)
//   COMPACTION_BATCHES       most batches per database per run (default 50): the next run goes on
//   COMPACTION_LEASE_TTL     seconds the lease lives unless renewed by a batch (default 300)
//   COMPACTION_BATCH_CHECKPOINTS  most checkpoints deleted per batch (--batch-checkpoints,
//                            default 2000)
//   COMPACTION_DATABASES     optional: the bindings to compact, comma-separated (default: all
//                            of DATABASES)
// Bad settings make every reachable database record a failed run, and nothing is deleted.
//
// Per database: set up or migrate the schema (as `d1saver compact` does), take the lease
// "compaction" (the CLI's: they never run at once; held, the run records that it skipped),
// go on from the cursor, run at most COMPACTION_BATCHES batches of the plan (each one
// transaction: the lease check, the retention statements, the run's figures, the cursor),
// then end as the CLI ends (leftovers, the sweep) and release the lease in one batch.
// A run killed at any point leaves whole batches and a cursor; the next run goes on (after
// the lease expires). Each run is recorded per database (d1saver_compaction_runs; `d1saver
// compact --history`) and logged as one JSON line (`wrangler tail`). docs/COMPACTION.md.

import GENERATED from "./compaction.generated.js";

const S = GENERATED.statements;
const DEFAULT_BATCHES = 50;

// A run's refusal with the reason recorded.
class RunFailure extends Error {}

// --- settings ----------------------------------------------------------------------------

function databaseMap(env) {
  let map = env.DATABASES;
  if (typeof map === "string") {
    try {
      map = JSON.parse(map);
    } catch {
      map = undefined;
    }
  }
  return map && typeof map === "object" && !Array.isArray(map) ? map : null;
}

function isD1(value) {
  return !!value && typeof value.prepare === "function" && typeof value.batch === "function";
}

function integer(env, name, { min, fallback, optional = false }, errors) {
  const raw = env[name];
  if (raw === undefined || raw === null || (typeof raw === "string" && raw.trim() === "")) {
    if (fallback !== undefined || optional) return fallback ?? null;
    errors.push(`${name} is not set: set it in wrangler.toml's [vars] (e.g. ${name} = 20)`);
    return null;
  }
  const text = String(raw).trim();
  const value = /^[+-]?\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(value) || value < min) {
    errors.push(`${name} = ${JSON.stringify(raw)}: must be a whole number >= ${min}`);
    return null;
  }
  return value;
}

// The run's settings and databases: {keep, maxAgeDays, batches, leaseTtl, targets, errors}.
// `targets` are the databases the run can reach, to compact or, with errors, to record them
// in; an unknown binding is an error, and the other databases still record it.
export function readSettings(env) {
  const errors = [];
  const keep = integer(env, "COMPACTION_KEEP", { min: 1 }, errors);
  if (keep === null && errors.length && /-\d/.test(String(env.COMPACTION_KEEP))) {
    errors[errors.length - 1] += " (every thread keeps its head, so it stays resumable)";
  }
  const maxAgeDays = integer(env, "COMPACTION_MAX_AGE_DAYS", { min: 1, optional: true }, errors);
  const batches = integer(env, "COMPACTION_BATCHES", { min: 1, fallback: DEFAULT_BATCHES }, errors);
  const leaseTtl = integer(env, "COMPACTION_LEASE_TTL", { min: 1, fallback: GENERATED.lease_ttl }, errors);
  const batchCheckpoints = integer(env, "COMPACTION_BATCH_CHECKPOINTS",
    { min: 1, fallback: GENERATED.batch_checkpoints }, errors);
  const map = databaseMap(env);
  const targets = [];
  if (!map) {
    errors.push('DATABASES is not set: set it in [vars], e.g. DATABASES = { "<database id>" = "DB_A" }');
    return { keep, maxAgeDays, batches, leaseTtl, batchCheckpoints, targets, errors };
  }
  const byBinding = new Map(Object.entries(map).map(([id, binding]) => [binding, id]));
  let wanted = [...byBinding.keys()];
  const listed = env.COMPACTION_DATABASES;
  if (listed !== undefined && listed !== null && String(listed).trim() !== "") {
    wanted = Array.isArray(listed) ? listed.map(String) : String(listed).split(",");
    wanted = wanted.map((b) => b.trim()).filter((b) => b !== "");
  }
  const all = [...byBinding.keys()].filter((b) => isD1(env[b]))
    .map((binding) => ({ databaseId: byBinding.get(binding), binding, db: env[binding] }));
  for (const binding of wanted) {
    if (!byBinding.has(binding)) {
      errors.push(`COMPACTION_DATABASES names ${JSON.stringify(binding)}, which is not a binding ` +
        `of DATABASES (${[...byBinding.keys()].join(", ")})`);
    } else if (!isD1(env[binding])) {
      errors.push(`DATABASES maps ${byBinding.get(binding)} to ${JSON.stringify(binding)}, which is ` +
        "not a D1 binding: add a [[d1_databases]] entry with that binding");
    } else {
      targets.push({ databaseId: byBinding.get(binding), binding, db: env[binding] });
    }
  }
  // With bad settings nothing is compacted, and every database that can record it does.
  return { keep, maxAgeDays, batches, leaseTtl, batchCheckpoints,
    targets: errors.length ? all : targets, errors };
}

// --- statements: the generated ones, their slots filled --------------------------------

function hexJsonList(ids) {
  const enc = new TextEncoder();
  const hex = (id) => Array.from(enc.encode(String(id)), (b) => b.toString(16).padStart(2, "0")).join("");
  return "[" + ids.map((id) => `"${hex(id)}"`).join(", ") + "]";
}

function fill(param, args) {
  if ("value" in param) return param.value;
  if (!(param.slot in args)) throw new Error(`no value for the statement slot ${param.slot}`);
  const value = args[param.slot];
  if (value === null || value === undefined) return null;
  switch (GENERATED.slots[param.slot]) {
    case "number": return Number(value);
    case "hex_json_list": return hexJsonList(value);
    default: return String(value);
  }
}

function prepare(db, group, args) {
  return group.map((s) => db.prepare(s.sql).bind(...s.params.map((p) => fill(p, args))));
}

// One statement's rows, or a batch's results (one transaction).
async function rows(db, group, args = {}) {
  const [stmt] = prepare(db, group, args);
  return (await stmt.all()).results ?? [];
}

async function batch(db, prepared) {
  return db.batch(prepared);
}

function message(e) {
  return e instanceof Error ? e.message : String(e);
}

// --- schema: as D1Saver.setup() does it ----------------------------------------------------

async function ensureSchema(db) {
  let info;
  try {
    info = await rows(db, S.read_schema);
  } catch (e) {
    if (!/no such table/.test(message(e))) throw e;
    const results = await batch(db, prepare(db, S.setup, {}));
    info = results[results.length - 1].results ?? [];
  }
  const version = Math.max(0, ...info.map((r) => Number(r.version)));
  const minReader = Math.max(1, ...info.map((r) => Number(r.min_reader ?? 1)));
  if (minReader > GENERATED.schema_version) {
    throw new RunFailure(`the database's schema v${version} needs d1saver schema >= v${minReader}; ` +
      `this Worker was built for v${GENERATED.schema_version}: rebuild it with a newer d1saver ` +
      "(`d1saver gateway build`) and deploy it");
  }
  for (let v = Math.max(version, 1) + 1; v <= GENERATED.schema_version; v++) {
    try {
      await batch(db, prepare(db, GENERATED.migrations[String(v)], {}));
    } catch (e) {
      if (!/d1saver_schema\.version/.test(message(e))) throw e; // applied already
    }
  }
}

// --- one database ------------------------------------------------------------------------

function emptyFigures() {
  return { threads_scanned: 0, threads_compacted: 0, threads_expired: 0, checkpoints_deleted: 0,
    writes_deleted: 0, bytes_freed: 0, batches: 0, staged_removed: 0, store_items_swept: 0,
    cache_entries_swept: 0 };
}

// Checkpoint timestamps are Python's isoformat() in UTC ("...T12:00:00.123456+00:00"), compared
// as text: the cutoff is written the same way, as `d1saver compact --max-age` computes it.
export function cutoffText(now, days) {
  return new Date(now - days * 86_400_000).toISOString().replace("Z", "000+00:00");
}

// The retention statements' summary (RECORDED_PLAN), found once: the statement whose rows
// carry the summary's columns.
const SUMMARY_AT = GENERATED.summary_index;

// A figure of the run's end (GENERATED.finish_figures: where `d1saver compact` reads it).
function finishFigure(results, at) {
  const result = results[at.statement] ?? {};
  if (at.read === "changes") return Number(result.meta?.changes ?? 0);
  const [row] = result.results ?? [];
  return row ? Number(Object.values(row)[0]) : 0;
}

async function compactDatabase(target, settings, run) {
  const { db, databaseId } = target;
  const figures = emptyFigures();
  const base = { run_id: run.id, database_id: databaseId, trigger: run.trigger,
    keep: settings.keep, max_age_days: settings.maxAgeDays };
  await ensureSchema(db);
  const record = async (status, reason) => {
    await batch(db, [
      ...prepare(db, S.run_begin, { ...base, status, reason }),
      ...prepare(db, S.run_end, { ...base, status, reason, threads_scanned: 0 }),
    ]);
    return { status, reason, ...figures };
  };
  if (settings.errors.length) return record("failed", `bad settings: ${settings.errors.join("; ")}`);

  const lease = { lease: GENERATED.lease_name, holder: `cron:${run.id}`, ttl: settings.leaseTtl };
  if ((await rows(db, S.acquire_lease, lease)).length === 0) {
    const [held] = await rows(db, S.lease_holder, lease);
    return record("skipped", `the lease is held by ${held ? held.holder : "?"} ` +
      `(${held ? held.seconds_left : "?"} s left): another compaction, rebalance or rekey run ` +
      "is active; this database is compacted by the next run");
  }
  let status = "failed", reason = null, ended = false;
  try {
    await batch(db, [
      ...prepare(db, S.runs_interrupted, base),
      ...prepare(db, S.run_begin, { ...base, status: "running", reason: null }),
    ]);
    const cursorArgs = { cursor: GENERATED.cursor_name };
    const [cursor] = await rows(db, S.cursor_get, cursorArgs);
    const cutoff = settings.maxAgeDays === null ? null : cutoffText(run.now, settings.maxAgeDays);

    // One batch: the lease check and renewal, the retention statements, the run's figures,
    // the cursor. D1 runs it as one transaction: all of it or nothing.
    const runBatch = async (threads, keep, expired) => {
      const opId = crypto.randomUUID().replaceAll("-", "");
      const args = { ...base, ...lease, ...cursorArgs, thread_ids: threads, keep, op_id: opId,
        expired: expired ? 1 : 0, after: threads[threads.length - 1] };
      let results;
      try {
        results = await batch(db, prepare(db, [...S.lease_guard, ...S.retention, ...S.run_add_batch,
          ...S.cursor_set], args));
      } catch (e) {
        if (/lease_lost/.test(message(e))) {
          throw new RunFailure("this run lost its lease (it expired and another run took it); " +
            "nothing of this batch was applied");
        }
        throw e;
      }
      figures.batches += 1;
      for (const row of results[S.lease_guard.length + SUMMARY_AT].results ?? []) {
        const gone = Number(row.checkpoints);
        figures.checkpoints_deleted += gone;
        figures.writes_deleted += Number(row.writes);
        figures.bytes_freed += Number(row.bytes);
        if (expired) figures.threads_expired += 1;
        else if (gone) figures.threads_compacted += 1;
      }
    };

    // The plan is the database's (S.plan_page, the statement `d1saver compact` plans with):
    // each thread of a page with its batch, or none. Batches follow thread order, so the
    // cursor (the last thread of the last batch) splits done from to do.
    let after = cursor ? String(cursor.after) : "";
    let spent = false;
    pages: for (;;) {
      const page = await rows(db, S.plan_page, { after, size: GENERATED.page_size,
        keep: settings.keep, cutoff, batch_checkpoints: settings.batchCheckpoints,
        batch_threads: GENERATED.batch_threads });
      const batches = [];
      for (const t of page) {
        if (Number(t.staged)) continue; // a copy or a move's rows: no thread
        figures.threads_scanned += 1;
        if (t.batch === null || t.batch === undefined) continue; // nothing to do: no request
        const last = batches[batches.length - 1];
        if (!last || last.n !== Number(t.batch)) {
          batches.push({ n: Number(t.batch), expired: !!Number(t.expired), threads: [] });
        }
        batches[batches.length - 1].threads.push(String(t.thread_id));
      }
      for (const b of batches) {
        if (figures.batches >= settings.batches) {
          spent = true;
          break pages;
        }
        await runBatch(b.threads, b.expired ? 0 : settings.keep, b.expired);
      }
      if (page.length < GENERATED.page_size) break;
      after = String(page[page.length - 1].thread_id);
    }
    if (spent) {
      status = "partial";
      reason = `budget of ${settings.batches} batches spent (COMPACTION_BATCHES); the next run goes on`;
    } else {
      await batch(db, prepare(db, S.cursor_clear, cursorArgs));
      status = "done";
    }
    // The end of every run, as `d1saver compact` ends: staged rows killed copies and moves
    // left, the memory and cache expired by the database's clock, the lease released; with
    // the run's record, in one batch.
    const results = await batch(db, [
      ...prepare(db, S.run_end, { ...base, status, reason, threads_scanned: figures.threads_scanned }),
      ...prepare(db, S.finish, lease),
    ]);
    ended = true;
    const finished = results.slice(S.run_end.length);
    for (const [name, at] of Object.entries(GENERATED.finish_figures)) {
      figures[name] = finishFigure(finished, at);
    }
  } catch (e) {
    status = "failed";
    reason = message(e);
    throw e;
  } finally {
    if (!ended) {
      try {
        await batch(db, [
          ...prepare(db, S.run_end, { ...base, status, reason, threads_scanned: figures.threads_scanned }),
          ...prepare(db, S.release_lease, lease),
        ]);
      } catch (e) {
        reason = `${reason ?? ""}${reason ? "; " : ""}recording the run failed: ${message(e)}`;
      }
    }
  }
  return { status, reason, ...figures };
}

// --- the run -------------------------------------------------------------------------------

// Compacts every database the settings name; returns (and logs, as one JSON line) the run.
export async function runCompaction(env, { cron = "manual", now = Date.now() } = {}) {
  const run = { id: crypto.randomUUID().replaceAll("-", ""), trigger: cron, now };
  const settings = readSettings(env);
  const databases = {};
  for (const target of settings.targets) {
    try {
      databases[target.databaseId] = await compactDatabase(target, settings, run);
    } catch (e) {
      databases[target.databaseId] = { status: "failed", reason: message(e), ...emptyFigures() };
    }
  }
  const line = {
    event: "d1saver.compaction", run_id: run.id, trigger: cron,
    started_at: new Date(now).toISOString(), ended_at: new Date().toISOString(),
    settings: { keep: settings.keep, max_age_days: settings.maxAgeDays, batches: settings.batches,
      batch_checkpoints: settings.batchCheckpoints, lease_ttl: settings.leaseTtl },
    errors: settings.errors, databases,
  };
  console.log(JSON.stringify(line));
  return line;
}
