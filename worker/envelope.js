// D1's REST envelope: {success, errors: [{code, message}], messages, result}.

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
    headers: { "content-type": "application/json; charset=UTF-8", ...headers },
  });
}
