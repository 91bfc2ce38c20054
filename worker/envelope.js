// D1's REST envelope: {success, errors: [{code, message}], messages, result}.

import { CAPABILITIES } from "./rank.js";

// A refusal the gateway answers with D1's error envelope.
export class GatewayError extends Error {
  constructor(status, code, message, headers = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = headers;
  }
}

export function failure(status, code, message, headers = {}) {
  return json(status, { success: false, errors: [{ code, message }], messages: [], result: null }, headers);
}

export function success(result) {
  return json(200, { success: true, errors: [], messages: [], result });
}

function json(status, body, headers) {
  return new Response(JSON.stringify(body), {
    status,
    // What this gateway does beyond D1's API, for d1saver to find (d1saver/http/client.py).
    headers: { "content-type": "application/json; charset=UTF-8", "d1saver-gateway": CAPABILITIES, ...headers },
  });
}
