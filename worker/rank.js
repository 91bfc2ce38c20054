// Search by meaning next to the data: D1Store's ranked search, scored in the Worker.
//
// D1Store sends its search's rows statement (RANK_ROWS: every item in scope with its value,
// SQL's filter verdict, and one row per vector) followed by RANK_MARK, `SELECT :spec AS
// rank_spec`, in the same batch. Here the rows are scored exactly against the spec's query
// and only the rows of the items that can be in the page are sent back; the mark's result
// says so (rank_spec 1). D1 itself, or a gateway without this, runs the mark as plain SQL:
// it returns the spec, the rows come back whole, and D1Store ranks them itself. D1Store learns
// that this gateway ranks from the `d1saver-gateway` header on its responses (envelope.js).

export const CAPABILITIES = "rank";

// RANK_MARK as d1saver sends it (d1saver/sql/memory.py; tests/gateway/test_rank.py holds the two
// together).
const MARK = /^SELECT \?1? rank_spec$/;

// Scores within this much of the page's last are kept too: D1Store scores the rows it gets
// again with its own arithmetic, which may differ from this in the last bits.
const MARGIN = 1e-9;

export function rankResults(statements, results, raw) {
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
    results[i - 1].results = keepBest(results[i - 1].results, raw, spec);
    results[i].results = raw ? { columns: ["rank_spec"], rows: [[1]] } : [{ rank_spec: 1 }];
  }
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

// A stored vector: float32 little-endian in base64 (d1saver/memory/values.py).
function decode(text) {
  const bin = atob(text);
  const view = new DataView(new ArrayBuffer(bin.length));
  for (let i = 0; i < bin.length; i++) view.setUint8(i, bin.charCodeAt(i));
  const out = new Float64Array(bin.length >> 2);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

// Scores as d1saver/memory/values.py similarity gives them, higher nearer.
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
