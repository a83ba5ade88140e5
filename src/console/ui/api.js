/**
 * The admin API client: the admin token for this tab (sessionStorage only), calls with it, and errors in
 * plain words. A refused token while signed in raises `SIGNED_OUT` instead of calling into the shell.
 */

/** The event a refused token raises while signed in (`detail`: the message); the shell signs out on it. */
export const SIGNED_OUT = 'tollgate:signed-out';


// The admin token is kept in sessionStorage: it survives a reload of this tab, is forgotten when the tab
// closes or on "Sign out", and never goes to localStorage, a cookie or the URL. API keys are never kept
// anywhere: a new key is shown once in its dialog, which empties itself when it closes.
const TOKEN_STORAGE = 'tollgate-console-admin-token';

export const session = {
  token() {
    try {
      return sessionStorage.getItem(TOKEN_STORAGE) || '';
    } catch {
      return '';
    }
  },
  save(token) {
    sessionStorage.setItem(TOKEN_STORAGE, token);
  },
  forget() {
    try {
      sessionStorage.removeItem(TOKEN_STORAGE);
    } catch {
      /* storage unavailable: nothing was kept */
    }
  },
};

/** An error answer of the admin API: HTTP status and the body's `error.message`, `code` and `param`. */
class ApiError extends Error {
  constructor(status, message, code = null, param = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

/**
 * One admin call with `Authorization: Bearer <token>`. Answers the parsed JSON (or a Blob with
 * `as: 'blob'`); throws an ApiError. A 401 or a closed admin API while signed in signs out.
 */
export async function request(method, path, { body, token = session.token(), as = 'json' } = {}) {
  const headers = { Authorization: `Bearer ${token}` };
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `Cannot reach tollgate (${e.message}). Is it still running?`);
  }
  if (!res.ok) {
    const err = await errorOf(res);
    if (token && token === session.token() && isAuthFailure(err)) {
      window.dispatchEvent(new CustomEvent(SIGNED_OUT, { detail: authMessage(err, true) }));
    }
    throw err;
  }
  return as === 'blob' ? res.blob() : res.json();
}

async function errorOf(res) {
  let message = `${res.status} ${res.statusText}`.trim();
  let code = null;
  let param = null;
  try {
    const body = await res.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code ?? null;
      param = body.error.param ?? null;
    }
  } catch {
    /* not JSON: keep the status line */
  }
  return new ApiError(res.status, message, code, param);
}

export const api = {
  get: (path) => request('GET', path),
  post: (path, body = {}) => request('POST', path, { body }),
  put: (path, body) => request('PUT', path, { body }),
  del: (path) => request('DELETE', path),
  blob: (path) => request('GET', path, { as: 'blob' }),
};

/** A path segment (key, group or model name) for an admin URL. */
export const seg = (name) => encodeURIComponent(name);

function isAuthFailure(err) {
  return err.status === 401 || (err.status === 403 && err.code === 'admin_disabled');
}

/** Plain words for a refused token or a closed admin API. */
export function authMessage(err, wasSignedIn = false) {
  if (err.status === 401) {
    return wasSignedIn
      ? 'tollgate no longer accepts this admin token (401): it may have restarted with another one. Sign in again.'
      : 'Wrong admin token: tollgate refused it (401). Check the value of the variable that admin_token_env names.';
  }
  if (err.code === 'admin_disabled') {
    return `The admin API is closed (403): ${err.message}`;
  }
  return err.message;
}
