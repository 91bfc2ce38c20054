// d1saver's gateway: D1's REST API in front of D1 bindings, to deploy as a Worker.
//
//   POST /client/v4/accounts/:account/d1/database/:database/query   rows as objects
//   POST /client/v4/accounts/:account/d1/database/:database/raw     rows as {columns, rows}
//
// Body {"sql": "...", "params": [...]} or {"batch": [{"sql", "params"}, ...]}; the answer is
// D1's envelope {success, errors, messages, result: [one entry per statement]}. `:database`
// picks the binding (DATABASES in wrangler.toml, see databases.js); `:account` is not checked.
// The bearer token is the API_TOKEN secret. Only the binding's public API is used (d1.js).
// README "Deploying the gateway" and docs/REAL_ENGINE.md describe it; tests/gateway/ test it.
//
// A ranked search of D1Store (a batch with RANK_MARK) is scored here, next to the data, and
// only the rows of the items that can be in its page go back (rank.js); every answer says so
// in its `d1saver-gateway` header.
//
// Its Cron Trigger ([triggers] in wrangler.toml) compacts the databases as `d1saver compact`
// does (compaction.js; docs/COMPACTION.md).

import { authorize, configuredToken } from "./auth.js";
import { bindingFor } from "./databases.js";
import { GatewayError, failure, success } from "./envelope.js";
import { run } from "./d1.js";
import { runCompaction } from "./compaction.js";
import { parseStatements, readBody } from "./request.js";
import { rankResults } from "./rank.js";

const ROUTE = /^\/client\/v4\/accounts\/[^/]+\/d1\/database\/([^/]+)\/(query|raw)\/?$/;

export default {
  async fetch(request, env) {
    try {
      return await handle(request, env);
    } catch (e) {
      if (e instanceof GatewayError) return failure(e.status, e.code, e.message, e.headers);
      return failure(500, 10001, `gateway: ${e instanceof Error ? e.message : String(e)}`);
    }
  },

  // The Cron Trigger: one compaction run over the databases (its record and log line say
  // what it did; a failure is recorded, not thrown).
  async scheduled(controller, env) {
    await runCompaction(env, { cron: controller.cron || "manual", now: controller.scheduledTime || Date.now() });
  },
};

// The checks run in this order: no secret (every request), path, token, method, database id,
// body size, body shape; then the SQL. A caller without the token learns nothing about the
// database ids.
async function handle(request, env) {
  const token = configuredToken(env);
  const path = new URL(request.url).pathname;
  const route = ROUTE.exec(path);
  if (!route) {
    throw new GatewayError(404, 7003, `Could not route to ${path}, perhaps your object identifier is invalid?`);
  }
  await authorize(request, token);
  if (request.method !== "POST") {
    throw new GatewayError(405, 7001, "Method not allowed", { allow: "POST" });
  }
  const db = bindingFor(env, route[1]);
  const statements = parseStatements(await readBody(request));
  const raw = route[2] === "raw";
  const results = await run(db, statements, raw);
  await rankResults(db, statements, results, raw, run); // D1Store's ranked searches (rank.js)
  return success(results);
}
