// Statements run on a D1 binding through its public API, answered in D1's REST shapes.

import { GatewayError } from "./envelope.js";

// One result entry per statement: {results, success, meta}. `raw` selects /raw's
// {columns, rows} over /query's rows as objects.
//
// One statement runs with .all() (rows and meta); several with db.batch(), which D1 runs as
// one transaction: if any statement fails, none of them takes effect. Both return rows as
// objects; /raw's columns are the first row's keys, so:
// - a statement that returns no rows has `columns: []`;
// - duplicate column names collapse into one (the binding keeps the last value): name every
//   result column uniquely (d1saver's SQL does);
// - integer-like names ("1", as in an unaliased `SELECT 1`) come first, as JavaScript orders
//   such keys.
export async function run(db, statements, raw) {
  const prepared = statements.map((s) => db.prepare(s.sql).bind(...s.params));
  let results;
  try {
    results = prepared.length === 1 ? [await prepared[0].all()] : await db.batch(prepared);
  } catch (e) {
    // The binding's SQL failures read "D1_ERROR: no such table: x: SQLITE_ERROR", as D1's
    // API words them; anything else is the gateway's own failure.
    const message = e instanceof Error ? e.message : String(e);
    if (/^D1_[A-Z_]*ERROR\b/.test(message)) throw new GatewayError(400, 7500, message);
    throw new GatewayError(500, 10001, `gateway: ${message}`);
  }
  return results.map((r) => ({ results: shape(r.results ?? [], raw), success: true, meta: r.meta ?? {} }));
}

function shape(rows, raw) {
  if (!raw) return rows.map((row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, cell(v)])));
  const columns = rows.length > 0 ? Object.keys(rows[0]) : [];
  return { columns, rows: rows.map((row) => columns.map((c) => cell(row[c]))) };
}

// BLOBs travel as arrays of byte values, as D1's API returns them (the binding already gives
// arrays today; an ArrayBuffer would be converted).
function cell(value) {
  if (value instanceof ArrayBuffer) return Array.from(new Uint8Array(value));
  if (ArrayBuffer.isView(value)) return Array.from(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
  return value;
}
