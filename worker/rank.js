// Search by meaning next to the data: D1Store's ranked search, scored in the Worker.
//
// D1Store sends its prefilter's first request (RANK_ROWS: a small scope whole, every item
// with its value, SQL's filter verdict and one row per vector; SEARCH_CODES: a large scope's
// codes) followed by RANK_MARK, `SELECT :spec AS rank_spec`, in the same batch. Here the
// codes choose the candidates, whose rows and vectors are read next to the data; the rows
// are scored exactly against the spec's query and only those of the items that can be in the
// page are sent back, in RANK_ROWS's place; the mark's result says so (rank_spec 1). D1 itself, or a gateway without this, runs the mark as plain SQL:
// it returns the spec, and D1Store goes on as over D1's REST API. D1Store learns
// that this gateway ranks from the `d1saver-gateway` header on its responses (envelope.js).

export const CAPABILITIES = "rank";

// RANK_MARK as d1saver sends it (d1saver/sql/memory.py; tests/gateway/test_rank.py holds the two
// together).
const MARK = /^SELECT \?1? rank_spec$/;

// Scores within this much of the page's last are kept too: D1Store scores the rows it gets
// again with its own arithmetic, which may differ from this in the last bits.
const MARGIN = 1e-9;

// With a spec naming `then` (D1Store's prefilter, d1saver/memory/codes.py), the mark follows
// RANK_ROWS and SEARCH_CODES: for a large scope, the codes bound every item's score, the
// candidates' rows and vectors are read here (`then`, their rowids bound at `items`), and
// only those that can be in the page go back, in RANK_ROWS's place.
export async function rankResults(db, statements, results, raw, runBatch) {
  for (let i = 1; i < statements.length; i++) {
    const s = statements[i];
    if (!MARK.test(s.sql) || s.params.length !== 1 || typeof s.params[0] !== "string") continue;
    let spec;
    try {
      spec = JSON.parse(s.params[0]);
    } catch {
      continue;
    }
    if (!spec || !Array.isArray(spec.query) || !Number.isInteger(spec.keep)) continue;
    if (Array.isArray(spec.then) && i >= 2) {
      const codes = table(results[i - 1].results, raw);
      if (codes.rows.length > 0) {
        const rows = await candidates(db, spec, codes, runBatch);
        results[i - 2].results = keepBest(pack(rows, raw), raw, spec);
        results[i - 1].results = raw ? { columns: [], rows: [] } : [];
      } else {
        results[i - 2].results = keepBest(results[i - 2].results, raw, spec);
      }
    } else {
      results[i - 1].results = keepBest(results[i - 1].results, raw, spec);
    }
    results[i].results = raw ? { columns: ["rank_spec"], rows: [[1]] } : [{ rank_spec: 1 }];
  }
}

// A result as {columns, rows}, whichever shape it came in.
function table(result, raw) {
  if (raw) return result;
  const columns = result.length > 0 ? Object.keys(result[0]) : [];
  return { columns, rows: result.map((row) => columns.map((c) => row[c])) };
}

function pack(t, raw) {
  if (raw) return t;
  return t.rows.map((row) => Object.fromEntries(t.columns.map((c, n) => [c, row[n]])));
}

// The candidates' rows, as RANK_ROWS gives them: one row per vector (NULL when none).
async function candidates(db, spec, codes, runBatch) {
  const [item, verdict, code] = ["item", "verdict", "code"].map((c) => codes.columns.indexOf(c));
  const chosen = select(spec, codes.rows.map((r) => [r[item], Number(r[verdict]), r[code]]));
  const ids = JSON.stringify(chosen);
  const then = spec.then.map((t, n) => ({
    sql: t.sql,
    params: t.params.map((p, k) => (spec.items[n] === k ? ids : p)),
  }));
  const [items, vectors] = (await runBatch(db, then, true)).map((r) => table(r.results, true));
  const columns = [...items.columns, "vector"];
  const col = (t, c) => t.columns.indexOf(c);
  const byItem = new Map();
  for (const v of vectors.rows) {
    const id = JSON.stringify([v[col(vectors, "ns")], v[col(vectors, "key")]]);
    if (!byItem.has(id)) byItem.set(id, []);
    byItem.get(id).push(v[col(vectors, "vector")]);
  }
  const rows = [];
  for (const r of items.rows) {
    const id = JSON.stringify([r[col(items, "ns")], r[col(items, "key")]]);
    for (const v of byItem.get(id) ?? [null]) rows.push([...r, v]);
  }
  return { columns, rows };
}

// The rowids of the items whose score bound reaches the keep-th best lower bound among the
// items SQL knows pass the filter (codes.py select, the same arithmetic); every item when
// fewer than keep of those have vectors.
function select(spec, rows) {
  const q = Float64Array.from(spec.query, Number);
  let q1 = 0;
  let qq = 0;
  for (const x of q) {
    q1 += Math.abs(x);
    qq += x * x;
  }
  const qn = Math.sqrt(qq);
  const items = new Map();
  for (const [id, verdict, code] of rows) {
    let it = items.get(id);
    if (!it) items.set(id, (it = { low: -Infinity, high: -Infinity, has: false, sure: verdict === 2 }));
    if (code === null || code === undefined) continue;
    it.has = true;
    const b = bounds(code, q, q1, qn, spec.distance || "cosine");
    if (b === null) {
      it.high = Infinity;
    } else {
      it.low = Math.max(it.low, b[0]);
      it.high = Math.max(it.high, b[1]);
    }
  }
  const all = [...items.entries()];
  const lows = all.filter(([, it]) => it.has && it.sure).map(([, it]) => it.low);
  if (lows.length < spec.keep) return all.map(([id]) => id);
  lows.sort((a, b) => b - a);
  const floor = lows[spec.keep - 1];
  return all.filter(([, it]) => it.has && it.high >= floor).map(([id]) => id);
}

const SLACK = 1e-9;

function bounds(code, q, q1, qn, distance) {
  if (!code) return null;
  const bin = atob(code);
  const dims = q.length;
  if (bin.length < 17 + dims || bin.charCodeAt(0) !== 1) return null;
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const scale = view.getFloat32(1, true);
  const err = view.getFloat32(5, true) * q1;
  const norm = view.getFloat64(9, true);
  let dot = 0;
  for (let i = 0; i < dims; i++) dot += q[i] * view.getInt8(17 + i);
  dot *= scale;
  const pad = SLACK * (Math.abs(dot) + err + qn * norm) + 1e-12;
  let lo = dot - err - pad;
  let hi = dot + err + pad;
  if (distance === "cosine") {
    if (norm === 0 || qn === 0) return [0, 0];
    lo /= qn * norm;
    hi /= qn * norm;
    const slack = SLACK * (Math.abs(lo) + Math.abs(hi)) + 1e-12;
    return [lo - slack, hi + slack];
  }
  if (distance === "inner_product") return [lo, hi];
  const base = qn * qn + norm * norm;
  const slack = SLACK * base + 1e-12;
  const far = Math.max(0, base - 2 * lo);
  const near = Math.max(0, base - 2 * hi);
  return [-Math.sqrt(far + slack), -Math.sqrt(Math.max(0, near - slack))];
}

function keepBest(table, raw, spec) {
  const columns = raw ? table.columns : table.length > 0 ? Object.keys(table[0]) : [];
  const rows = raw ? table.rows : table.map((row) => columns.map((c) => row[c]));
  const at = (name) => columns.indexOf(name);
  const [ns, key, verdict, vector] = [at("ns"), at("key"), at("verdict"), at("vector")];
  if (ns < 0 || key < 0 || verdict < 0 || vector < 0) return table;
  const query = Float64Array.from(spec.query, Number);
  const score = scorer(query, spec.distance || "cosine");
  const items = new Map();
  rows.forEach((row) => {
    const id = JSON.stringify([row[ns], row[key]]);
    let item = items.get(id);
    if (!item) items.set(id, (item = { best: -Infinity, scored: false, sure: Number(row[verdict]) === 2 }));
    if (row[vector] === null || row[vector] === undefined) return;
    const s = score(decode(row[vector]));
    item.scored = true;
    if (s > item.best) item.best = s;
  });
  const sure = [...items.values()].filter((it) => it.sure && it.scored).map((it) => it.best);
  if (spec.keep <= 0 || sure.length < spec.keep) return table; // the page may need them all
  sure.sort((a, b) => b - a);
  const last = sure[spec.keep - 1];
  const floor = last - MARGIN * (Math.abs(last) + 1);
  const kept = (row) => {
    const it = items.get(JSON.stringify([row[ns], row[key]]));
    return it.scored && it.best >= floor;
  };
  if (raw) return { columns, rows: rows.filter(kept) };
  return table.filter((_, n) => kept(rows[n]));
}

// A stored vector: float32 little-endian in base64 (d1saver/memory/encoding.py).
function decode(text) {
  const bin = atob(text);
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const out = new Float64Array(bin.length >> 2);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

// Scores as d1saver/memory/encoding.py similarity gives them, higher nearer.
function scorer(q, distance) {
  let qq = 0;
  for (let i = 0; i < q.length; i++) qq += q[i] * q[i];
  const qn = Math.sqrt(qq);
  return (v) => {
    if (v.length !== q.length) return -Infinity;
    let dot = 0;
    let vv = 0;
    let d2 = 0;
    for (let i = 0; i < q.length; i++) {
      dot += q[i] * v[i];
      vv += v[i] * v[i];
      d2 += (q[i] - v[i]) * (q[i] - v[i]);
    }
    if (distance === "inner_product") return dot;
    if (distance === "l2") return -Math.sqrt(d2);
    const vn = Math.sqrt(vv);
    return qn > 0 && vn > 0 ? dot / (qn * vn) : 0;
  };
}
