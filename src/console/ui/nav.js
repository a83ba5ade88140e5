/**
 * Where the console is: the view and its parameters in the location hash, and going to another one.
 */

/** The view and its parameters from the location hash: #usage?key=app&status=5xx. */
export function parseHash() {
  const raw = location.hash.replace(/^#/, '');
  const q = raw.indexOf('?');
  return {
    name: (q < 0 ? raw : raw.slice(0, q)) || 'overview',
    params: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)),
  };
}

export function viewHash(name, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) q.set(k, v);
  const s = q.toString();
  return `#${name}${s ? `?${s}` : ''}`;
}

/** Goes to a hash; renders again when it is the current one (no hashchange then). */
export function navigate(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = hash;
}
