// Which D1 binding serves a database id: the DATABASES map in wrangler.toml's [vars].
//
//   [vars]
//   DATABASES = { "<database id>" = "<binding name>", ... }
//
// The ids are what clients put in the URL (D1_DATABASE_ID); using each database's own D1 id
// (`database_id` of its [[d1_databases]] entry) lets the same D1_DATABASE_ID work against
// api.cloudflare.com and against the gateway.

import { GatewayError } from "./envelope.js";

export function bindingFor(env, databaseId) {
  const map = databaseMap(env);
  const name = Object.hasOwn(map, databaseId) ? map[databaseId] : undefined;
  if (name === undefined) {
    throw new GatewayError(404, 7404, `The database ${databaseId} could not be found`);
  }
  const db = typeof name === "string" && Object.hasOwn(env, name) ? env[name] : undefined;
  if (!db || typeof db.prepare !== "function" || typeof db.batch !== "function") {
    throw new GatewayError(500, 10001,
      `gateway misconfigured: DATABASES maps ${databaseId} to ${JSON.stringify(name)}, which is ` +
      "not a D1 binding: add a [[d1_databases]] entry with that binding to wrangler.toml");
  }
  return db;
}

// [vars] tables arrive as objects; a JSON string (e.g. from `--var` or the dashboard) works too.
function databaseMap(env) {
  let map = env.DATABASES;
  if (typeof map === "string") {
    try {
      map = JSON.parse(map);
    } catch {
      map = undefined;
    }
  }
  if (!map || typeof map !== "object" || Array.isArray(map)) {
    throw new GatewayError(500, 10001,
      'gateway misconfigured: set DATABASES in wrangler.toml\'s [vars], e.g. DATABASES = { "<database id>" = "DB_A" }');
  }
  return map;
}
