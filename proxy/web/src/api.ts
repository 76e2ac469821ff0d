// The web view's HTTP API (docs/web.md): its JSON shapes and one function per path.

export interface Verdict {
  verdict: 'ok' | 'violation' | 'framing';
  class?: string;
  code?: unknown;
  seed?: unknown;
  reason?: string;
}

/** One inspected frame: the `--log json` line plus its number `n`. */
export interface Row {
  n: number;
  route: string;
  conn: number;
  session: number;
  channel: string;
  dir: 'up' | 'down';
  from: string;
  to: string;
  kind: string | null;
  method: string | null;
  id: unknown;
  stream?: [number, number];
  size: number;
  latency: number | null;
  trace: string | null;
  error?: unknown;
  verdict: Verdict;
  action?: string;
  time: number;
}

export interface Page {
  rows: Row[];
  total: number;
  evicted: number;
}

export interface Part {
  pointer: string;
  schema: string;
}

export interface Violation {
  class: string;
  code: unknown;
  seed: unknown;
  reason: string;
  entry: string | null;
  contract: unknown;
  action_entry?: string | null;
  action?: unknown;
}

export interface Detail {
  row: Row;
  message: unknown;
  raw: { len: number; hex: string; text: string; truncated: boolean };
  parts: Part[];
  violation: Violation | null;
  pair: number | null;
  trace_url: string | null;
}

export interface Session {
  session: number;
  routes: string[];
  rows: number;
  violations: number;
  first: number;
  last: number;
}

export interface Stats {
  messages: number;
  violations: number;
  refused: number;
  held: number;
  sent: number;
  drops: number;
  evicted: number;
  rows: number;
  rate: [number, number][];
}

export interface RouteInfo {
  name: string;
  channel: string;
  listen: string;
  upstream: string;
  client: string;
}

export interface Info {
  contract: string | null;
  version: string | null;
  source: 'live' | 'recording';
  mode: 'observe' | 'enforce' | null;
  routes: RouteInfo[];
  trace_url: string | null;
  keep: number;
}

/** Which rows the table shows: `--filter` conditions, a payload substring, a session (`all`). */
export interface Query {
  filters: string[];
  q: string;
  session: string;
}

/** A request the server refused: its status and its text body. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(body || `HTTP ${status}`);
  }
}

async function get(path: string, signal?: AbortSignal): Promise<Response> {
  const r = await fetch(path, { cache: 'no-store', signal });
  if (!r.ok) throw new HttpError(r.status, (await r.text()).trim());
  return r;
}

async function json<T>(path: string, signal?: AbortSignal): Promise<T> {
  return (await get(path, signal)).json() as Promise<T>;
}

/** The query string of `q` (without `offset`/`limit`). */
export function queryParams(q: Query): URLSearchParams {
  const p = new URLSearchParams();
  for (const f of q.filters) p.append('filter', f);
  if (q.q) p.set('q', q.q);
  if (q.session !== 'all') p.set('session', q.session);
  return p;
}

export const api = {
  info: () => json<Info>('/api/info'),
  stats: () => json<Stats>('/api/stats'),
  sessions: () => json<Session[]>('/api/sessions'),
  rows(q: Query, offset: number, limit: number, signal?: AbortSignal): Promise<Page> {
    const p = queryParams(q);
    p.set('offset', String(offset));
    p.set('limit', String(limit));
    return json<Page>(`/api/rows?${p}`, signal);
  },
  row: (n: number) => json<Detail>(`/api/rows/${n}`),
  diagramUrl: (session: number, format: 'svg' | 'mermaid') =>
    `/api/diagram?session=${session}&format=${format}`,
  async diagram(session: number): Promise<string> {
    return (await get(api.diagramUrl(session, 'svg'))).text();
  },
};
