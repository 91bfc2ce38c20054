// The request body: read within a size cap, then checked as D1's API checks it.
//
// Body {"sql": "...", "params": [...]} or {"batch": [{"sql", "params"}, ...]}. Every refusal
// is a GatewayError with D1's envelope: 413 past the cap, otherwise 400, code 7400.

import { GatewayError } from "./envelope.js";
import { splitStatements } from "./split.js";

// Whole-body cap. D1 itself refuses a statement over 100,000 bytes of SQL and a value over
// 2 MB (the engine answers those with its own errors, as D1's API does); the cap keeps one
// request's JSON, parsed and re-sent to D1, well inside a Worker's 128 MB of memory.
export const MAX_BODY_BYTES = 32 * 1024 * 1024;

export async function readBody(request, limit = MAX_BODY_BYTES) {
  const declared = Number(request.headers.get("content-length") ?? 0);
  if (declared > limit) throw tooLarge(limit);
  const chunks = [];
  let size = 0;
  if (request.body) {
    // Counted while read, so a chunked body without Content-Length is capped too.
    const reader = request.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limit) {
        await reader.cancel();
        throw tooLarge(limit);
      }
      chunks.push(value);
    }
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw malformed("not UTF-8");
  }
}

function tooLarge(limit) {
  return new GatewayError(413, 7400, `Request body larger than the gateway's limit of ${limit} bytes`);
}

function malformed(why) {
  return new GatewayError(400, 7400, `Malformed request body: ${why}`);
}

// The statements to run, in order: [{sql, params}].
//
// D1's REST API answers a "sql" holding several statements with one result per statement.
// Through the binding, such text runs whole and returns only the last statement's rows, so it
// is split here (params-less sql only: with params the text goes to D1 as is, and D1 refuses
// params on any statement but the last). The pieces then run as one batch: one transaction.
export function parseStatements(text) {
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw malformed("not JSON");
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) throw malformed("expected a JSON object");
  const isBatch = body.batch !== undefined;
  if (isBatch && (!Array.isArray(body.batch) || body.batch.length === 0)) {
    throw malformed('"batch" must be a non-empty array');
  }
  const entries = isBatch ? body.batch : [body];
  return entries.flatMap((entry, i) => {
    const one = statement(entry, isBatch ? `batch[${i}]` : "body");
    if (one.params.length > 0) return [one];
    const parts = splitStatements(one.sql);
    return parts.length > 1 ? parts.map((sql) => ({ sql, params: [] })) : [one];
  });
}

function statement(s, where) {
  if (!s || typeof s !== "object" || typeof s.sql !== "string") throw malformed(`${where}: "sql" must be a string`);
  if (s.params !== undefined && s.params !== null && !Array.isArray(s.params)) {
    throw malformed(`${where}: "params" must be an array`);
  }
  return { sql: s.sql, params: (s.params ?? []).map((p, i) => param(p, `${where}.params[${i}]`)) };
}

// Strings, numbers and null, as D1's API takes them; booleans become 1/0 as the binding's
// bind() and the local D1 (d1saver/local) make them. Numbers are doubles: integers beyond
// 2^53 lose precision on the way in, and 1e999 (Infinity) is refused.
function param(p, where) {
  if (p === null || typeof p === "string") return p;
  if (typeof p === "number") {
    if (!Number.isFinite(p)) throw malformed(`${where}: ${p} is not a finite number`);
    return p;
  }
  if (typeof p === "boolean") return p ? 1 : 0;
  throw malformed(`${where}: type ${Array.isArray(p) ? "array" : typeof p} not supported`);
}
