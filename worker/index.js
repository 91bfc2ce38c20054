// Dev/test Worker: D1's REST API in front of a D1 binding.
//
//   POST /client/v4/accounts/:account/d1/database/:db/query   rows as objects
//   POST /client/v4/accounts/:account/d1/database/:db/raw     rows as {columns, rows}
//
// Body {"sql": "...", "params": [...]} or {"batch": [{"sql", "params"}, ...]}; answers with
// Cloudflare's envelope {success, errors, messages, result: [one entry per statement]}.
// Run it with `npx wrangler dev --local` to get Cloudflare's real D1 engine (workerd +
// miniflare) on loopback. See docs/REAL_ENGINE.md.
//
// The Worker has ONE binding (env.DB): `:account` and `:db` are not checked, every database
// id reaches the same database.

const ROUTE = /^\/client\/v4\/accounts\/[^/]+\/d1\/database\/[^/]+\/(query|raw)\/?$/;

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const route = ROUTE.exec(url.pathname);
    if (!route) {
      return failure(404, 7003,
        `Could not route to ${url.pathname}, perhaps your object identifier is invalid?`);
    }
    if (!(await authorized(request, env))) {
      return failure(401, 10000, "Authentication error");
    }
    if (request.method !== "POST") {
      return failure(405, 7001, "Method not allowed");
    }

    let statements;
    try {
      statements = parseBody(await request.text());
    } catch (e) {
      return failure(400, 7400, `Malformed request body: ${e.message}`);
    }

    const format = route[1] === "raw" ? "ROWS_AND_COLUMNS" : "ARRAY_OF_OBJECTS";
    let answer;
    try {
      answer = await runOnD1(env.DB, statements, format);
    } catch (e) {
      // SQL failures read "D1_ERROR: no such table: x: SQLITE_ERROR", as the binding's own
      // errors do. A broken engine (not the caller's fault) is a 500.
      return failure(e instanceof EngineBroken ? 500 : 400, 7500, e.message);
    }
    const result = answer.map((r) => ({
      results: r.results ?? (format === "ROWS_AND_COLUMNS" ? { columns: [], rows: [] } : []),
      success: true,
      meta: r.meta ?? {},
    }));
    return json(200, { success: true, errors: [], messages: [], result });
  },
};

// --- Running SQL ---------------------------------------------------------------------------
//
// Why not env.DB.prepare(sql).bind(...).all() / .raw() / env.DB.batch()? Those are what a
// Worker normally uses, and they send exactly the request below; but .raw() drops `meta`
// (changes, rows_read, ...) and .all()/.batch() turn {columns, rows} into objects, which loses
// duplicate column names. So we send the binding's own request to the engine ourselves:
// `env.DB.fetcher` is the D1 service the binding wraps (workerd's cloudflare-internal:d1-api),
// and `POST http://d1/query?resultsFormat=...` with one {sql, params} or an array of them is
// its protocol. An array runs in one transaction (all or nothing), as env.DB.batch() does.
async function runOnD1(db, statements, format) {
  if (!db || !db.fetcher || typeof db.fetcher.fetch !== "function") {
    throw new EngineBroken("dev Worker: env.DB has no .fetcher (wrangler/workerd changed?)");
  }
  const body = statements.length === 1 ? statements[0] : statements;
  const response = await db.fetcher.fetch(`http://d1/query?resultsFormat=${format}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let answer;
  try {
    answer = JSON.parse(text);
  } catch {
    throw new EngineBroken(`dev Worker: engine answered HTTP ${response.status}: ${text.slice(0, 500)}`);
  }
  // A failure is one {success: false, error} for the whole request (the batch rolled back).
  if (!Array.isArray(answer)) {
    if (answer && answer.success === false) throw new Error(`D1_ERROR: ${answer.error}`);
    answer = [answer];
  }
  // miniflare already turns BLOBs into arrays of byte values; keep that true if it changes.
  return answer.map((r) => ({ ...r, results: blobsToArrays(r.results) }));
}

class EngineBroken extends Error {}

function blobsToArrays(value) {
  if (value instanceof ArrayBuffer) return Array.from(new Uint8Array(value));
  if (ArrayBuffer.isView(value)) return Array.from(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
  if (Array.isArray(value)) return value.map(blobsToArrays);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, blobsToArrays(v)]));
  }
  return value;
}

// --- Request body --------------------------------------------------------------------------

function parseBody(text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error("not JSON");
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) throw new Error("expected a JSON object");
  const entries = body.batch !== undefined ? body.batch : [body];
  if (body.batch !== undefined && (!Array.isArray(entries) || entries.length === 0)) {
    throw new Error('"batch" must be a non-empty array');
  }
  // D1's REST API answers a "sql" holding several statements with one result per statement.
  // The engine behind the binding runs them all but returns only the last one's rows, so we
  // split such text ourselves (params-less sql only: with params the engine gets the text as
  // is, and refuses params on any statement but the last). A single "sql" that we split runs
  // as one batch, i.e. in one transaction.
  return entries.flatMap((s, i) => {
    const one = statement(s, body.batch !== undefined ? `batch[${i}]` : "body");
    if (one.params.length > 0) return [one];
    const parts = splitStatements(one.sql);
    return parts.length > 1 ? parts.map((sql) => ({ sql, params: [] })) : [one];
  });
}

function statement(s, where) {
  if (!s || typeof s !== "object" || typeof s.sql !== "string") throw new Error(`${where}: "sql" must be a string`);
  if (s.params !== undefined && s.params !== null && !Array.isArray(s.params)) {
    throw new Error(`${where}: "params" must be an array`);
  }
  return { sql: s.sql, params: (s.params ?? []).map((p, i) => param(p, `${where}.params[${i}]`)) };
}

// The same conversions as the binding's bind(): booleans become 1/0, an array of byte values
// is a BLOB. JSON numbers are doubles: integers beyond 2^53 lose precision on the way in.
function param(p, where) {
  if (p === null || typeof p === "string" || typeof p === "number") return p;
  if (typeof p === "boolean") return p ? 1 : 0;
  // D1's REST API types params as scalars; arrays are refused, as the local D1 does.
  throw new Error(`${where}: type ${Array.isArray(p) ? "array" : typeof p} not supported`);
}

// Split SQL text at top-level semicolons, skipping '...', "...", `...`, [...] and comments.
// Inside CREATE TRIGGER ... BEGIN ... END only the semicolon after END ends the statement.
// Pieces holding only whitespace or comments are dropped. (Not exported: a Worker module's
// named exports are taken for entrypoints.)
function splitStatements(sql) {
  const out = [];
  let start = 0, hasCode = false, words = [], last = "";
  let i = 0;
  const n = sql.length;
  const isTrigger = () => words[1] === "TRIGGER" || (words[2] === "TRIGGER" && /^TEMP(ORARY)?$/.test(words[1]));
  while (i < n) {
    const c = sql[i];
    if (c === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      i = end === -1 ? n : end + 1;
    } else if (c === "/" && sql[i + 1] === "*") {
      const end = sql.indexOf("*/", i + 2);
      i = end === -1 ? n : end + 2;
    } else if (c === "'" || c === '"' || c === "`" || c === "[") {
      const close = c === "[" ? "]" : c;
      let j = i + 1;
      for (;;) {
        const k = sql.indexOf(close, j);
        if (k === -1) { j = n; break; }
        if (close !== "]" && sql[k + 1] === close) { j = k + 2; continue; } // doubled quote
        j = k + 1;
        break;
      }
      hasCode = true; last = "";
      i = j;
    } else if (c === ";") {
      if (!(words[0] === "CREATE" && isTrigger() && last !== "END")) {
        if (hasCode) out.push(sql.slice(start, i).trim());
        start = i + 1; hasCode = false; words = []; last = "";
      }
      i++;
    } else if (/[A-Za-z_]/.test(c)) {
      let j = i + 1;
      while (j < n && /[A-Za-z0-9_$]/.test(sql[j])) j++;
      last = sql.slice(i, j).toUpperCase();
      if (words.length < 3) words.push(last);
      hasCode = true;
      i = j;
    } else {
      if (!/\s/.test(c)) { hasCode = true; last = ""; }
      i++;
    }
  }
  if (hasCode) out.push(sql.slice(start).trim());
  return out;
}

// --- Auth and responses --------------------------------------------------------------------

async function authorized(request, env) {
  const expected = env.API_TOKEN;
  const header = request.headers.get("authorization") ?? "";
  const match = /^Bearer\s+(.+)$/i.exec(header);
  if (!expected || !match) return false;
  // timingSafeEqual needs equal lengths: compare SHA-256 digests so length leaks nothing.
  const enc = new TextEncoder();
  const [a, b] = await Promise.all([
    crypto.subtle.digest("SHA-256", enc.encode(match[1].trim())),
    crypto.subtle.digest("SHA-256", enc.encode(expected)),
  ]);
  return crypto.subtle.timingSafeEqual(a, b);
}

function failure(status, code, message) {
  return json(status, { success: false, errors: [{ code, message }], messages: [], result: null });
}

function json(status, body) {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json; charset=UTF-8" },
  });
}
