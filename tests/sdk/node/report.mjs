// What the drivers share: an SDK error as JSON, and one call's outcome printed as the last line (what the
// SDK read, or the error it raised).

export function errorOf(e) {
  return { name: e?.name ?? String(e), status: e?.status ?? null, message: String(e?.message ?? e) };
}

export async function report(run) {
  try {
    console.log(JSON.stringify(await run()));
  } catch (e) {
    console.log(JSON.stringify({ error: errorOf(e) }));
  }
}
