// The HTTP API as the console calls it: the key from localStorage, errors as ApiError.

const KEY = "agency.key";
// The path a reverse proxy serves Agency under (`X-Forwarded-Prefix`), "" when none.
export const ROOT = document.querySelector('meta[name="agency-root"]')?.content || "";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function apiKey() {
  return localStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

/** Call the API; resolves to the JSON body, rejects with ApiError carrying its message. */
export async function api(method, path, body, query) {
  const headers = {Authorization: "Bearer " + apiKey()};
  const init = {method, headers};
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const url = query ? `${path}?${params(query)}` : path;
  let response;
  try {
    response = await fetch(ROOT + url, init);
  } catch (e) {
    throw new ApiError(0, "the API does not answer: " + e.message);
  }
  const isJson = (response.headers.get("content-type") || "").includes("json");
  const data = isJson ? await response.json() : null;
  if (!response.ok) {
    throw new ApiError(response.status, (data && (data.error || data.detail)) || response.statusText);
  }
  return data;
}

export function params(query) {
  const out = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === "") continue;
    for (const v of Array.isArray(value) ? value : [value]) out.append(key, v);
  }
  return out.toString();
}

export const paths = {
  agency: (a) => `/agency/${a}`,
  thread: (a, t) => `/agency/${a}/agent/${t}`,
};
