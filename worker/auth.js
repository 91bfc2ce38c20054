// The bearer token: a Wrangler secret (API_TOKEN), compared in constant time.

import { GatewayError } from "./envelope.js";

// The configured token, or a refusal of every request when none is set: a gateway that
// forgot its secret must not serve anyone (and must not fall back to a known token).
// HTTP 500 because no client can fix it; code 10000 so clients report it as an auth problem
// at once instead of retrying a server error.
export function configuredToken(env) {
  const token = env.API_TOKEN;
  if (typeof token !== "string" || token.trim() === "") {
    throw new GatewayError(500, 10000,
      "This gateway has no API_TOKEN secret, so it refuses every request: set one with " +
      "`npx wrangler secret put API_TOKEN` (for `wrangler dev`: API_TOKEN=... in .dev.vars)");
  }
  return token;
}

// Refuses (401, code 10000, as D1's API does) unless the request carries
// `Authorization: Bearer <token>`. timingSafeEqual needs equal lengths, so both sides are
// hashed first: the comparison then leaks neither the token's bytes nor its length.
export async function authorize(request, token) {
  const match = /^Bearer\s+(.+)$/i.exec(request.headers.get("authorization") ?? "");
  if (match) {
    const enc = new TextEncoder();
    const [given, expected] = await Promise.all([
      crypto.subtle.digest("SHA-256", enc.encode(match[1].trim())),
      crypto.subtle.digest("SHA-256", enc.encode(token)),
    ]);
    if (crypto.subtle.timingSafeEqual(given, expected)) return;
  }
  throw new GatewayError(401, 10000, "Authentication error");
}
