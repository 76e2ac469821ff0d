// Entry point of the web view: lays out the page and wires the header, the filters, the
// flow table, the detail pane and the diagram to the API and its live stream.

import './app.css';
import { api, type Query, type Session, type Stats } from './api';
import { DetailPane } from './detail';
import { DiagramView } from './diagram';
import { h, replace } from './dom';
import { count } from './format';
import { Header } from './header';
import { FlowTable } from './table';

const header = new Header();
const table = new FlowTable();
const detail = new DetailPane();
const diagram = new DiagramView();
let sessions: Session[] = [];

// The toolbar: tabs, the query, following.
const session = h('select', { 'data-testid': 'session', id: 'session' }, h('option', { value: 'all' }, 'all sessions'));
const filter = h('input', {
  id: 'filter',
  'data-testid': 'filter',
  type: 'text',
  spellcheck: 'false',
  autocomplete: 'off',
  placeholder: 'KEY=VALUE …  e.g. method=stream.open verdict=violation',
  title: 'KEY=VALUE conditions, space-separated (method, kind, dir, from, verdict, channel, route), as --filter takes them',
});
const search = h('input', {
  id: 'search',
  'data-testid': 'search',
  type: 'search',
  spellcheck: 'false',
  autocomplete: 'off',
  placeholder: 'payload contains…',
});
const follow = h('input', { type: 'checkbox', 'data-testid': 'follow', id: 'follow', checked: true });
const rowCount = h('span', { class: 'row-count', 'data-testid': 'row-count', 'data-total': 0 }, '0 rows');
const error = h('p', { class: 'filter-error', 'data-testid': 'filter-error', role: 'alert', hidden: true });
const tabFlows = h(
  'button',
  { type: 'button', role: 'tab', id: 'tab-flows', 'aria-controls': 'panel-flows', 'aria-selected': 'true', 'data-testid': 'tab-flows' },
  'Flows',
);
const tabDiagram = h(
  'button',
  { type: 'button', role: 'tab', id: 'tab-diagram', 'aria-controls': 'panel-diagram', 'aria-selected': 'false', 'data-testid': 'tab-diagram', tabindex: -1 },
  'Diagram',
);
const form = h(
  'form',
  { class: 'query', 'data-testid': 'query', role: 'search' },
  h('label', { for: 'session' }, 'Session'),
  session,
  h('label', { for: 'filter' }, 'Filter'),
  filter,
  h('label', { for: 'search' }, 'Search'),
  search,
  h('button', { type: 'submit', 'data-testid': 'apply' }, 'Apply'),
  h('button', { type: 'button', 'data-testid': 'clear', onclick: () => clear() }, 'Clear'),
);
const panelFlows = h(
  'section',
  { class: 'panel flows-panel', role: 'tabpanel', id: 'panel-flows', 'aria-labelledby': 'tab-flows' },
  table.el,
  detail.el,
);
const panelDiagram = h(
  'section',
  { class: 'panel', role: 'tabpanel', id: 'panel-diagram', 'aria-labelledby': 'tab-diagram', hidden: true },
  diagram.el,
);

replace(
  document.body,
  header.el,
  h(
    'nav',
    { class: 'bar' },
    h('div', { role: 'tablist', 'aria-label': 'views', class: 'tabs' }, tabFlows, tabDiagram),
    form,
    h('label', { class: 'follow', for: 'follow' }, follow, ' Follow'),
    rowCount,
  ),
  error,
  h('main', {}, panelFlows, panelDiagram),
);

function currentQuery(): Query {
  return {
    filters: filter.value.split(/\s+/).filter(Boolean),
    q: search.value,
    session: session.value,
  };
}

function apply(): void {
  table.setQuery(currentQuery());
  if (!panelDiagram.hidden) void diagram.show(diagramSession());
}

function clear(): void {
  filter.value = '';
  search.value = '';
  session.value = 'all';
  apply();
}

form.addEventListener('submit', (e) => {
  e.preventDefault();
  apply();
});
session.addEventListener('change', apply);
follow.addEventListener('change', () => table.setFollow(follow.checked));

table.onFollow = (on) => (follow.checked = on);
table.onTotal = (n) => {
  rowCount.textContent = `${count(n)} ${n === 1 ? 'row' : 'rows'}`;
  rowCount.dataset.total = String(n);
};
table.onError = (text) => {
  error.hidden = text === null;
  error.textContent = text ?? '';
  filter.setAttribute('aria-invalid', String(text !== null));
};
table.onSelect = (n) => detail.show(n, 60);
detail.onPair = (n) => {
  void table.locate(n).then((i) =>
    i === null ? detail.show(n, 0, `Row ${n} is not among the rows the filters show.`) : table.selectRow(n, i),
  );
};
detail.onClose = () => {
  detail.show(null);
  table.scroller.focus();
};
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && !detail.el.hidden) detail.onClose();
});

// Tabs.
function showTab(which: 'flows' | 'diagram'): void {
  const d = which === 'diagram';
  panelFlows.hidden = d;
  panelDiagram.hidden = !d;
  tabFlows.setAttribute('aria-selected', String(!d));
  tabDiagram.setAttribute('aria-selected', String(d));
  tabFlows.tabIndex = d ? -1 : 0;
  tabDiagram.tabIndex = d ? 0 : -1;
  if (d) void loadSessions().then(() => diagram.show(diagramSession()));
}
tabFlows.addEventListener('click', () => showTab('flows'));
tabDiagram.addEventListener('click', () => showTab('diagram'));
for (const t of [tabFlows, tabDiagram]) {
  t.addEventListener('keydown', (e) => {
    if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight') return;
    const next = t === tabFlows ? tabDiagram : tabFlows;
    next.focus();
    showTab(next === tabFlows ? 'flows' : 'diagram');
  });
}

/** The diagram's session: the one selected, else the first. */
function diagramSession(): number | null {
  if (session.value !== 'all') return Number(session.value);
  return sessions.length ? sessions[0].session : null;
}

// Sessions, refreshed at most once a second while rows come (and once after the last tick).
let sessionsAt = 0;
let sessionsTimer = 0;
let sessionsLoad: Promise<void> | null = null;

function loadSessions(): Promise<void> {
  sessionsLoad ??= fetchSessions().finally(() => (sessionsLoad = null));
  return sessionsLoad;
}

async function fetchSessions(): Promise<void> {
  sessionsAt = Date.now();
  try {
    sessions = await api.sessions();
  } catch {
    return;
  }
  const keep = session.value;
  const opts = [h('option', { value: 'all' }, 'all sessions')];
  for (const s of sessions) {
    const v = s.violations ? `, ${count(s.violations)} violations` : '';
    opts.push(h('option', { value: s.session }, `#${s.session} (${s.routes.join(', ')}): ${count(s.rows)} rows${v}`));
  }
  if (keep !== 'all' && !sessions.some((s) => String(s.session) === keep)) {
    opts.push(h('option', { value: keep }, `#${keep} (gone)`));
  }
  replace(session, ...opts);
  session.value = keep;
}

function sessionsSoon(): void {
  if (sessionsTimer) return;
  const wait = Math.max(0, 1000 - (Date.now() - sessionsAt));
  sessionsTimer = window.setTimeout(() => {
    sessionsTimer = 0;
    void loadSessions();
  }, wait);
}

function stats(s: Stats): void {
  header.setStats(s);
  table.tick(s.evicted);
  sessionsSoon();
}

// The live stream: a tick whenever something changed.
function live(source: string): void {
  const es = new EventSource('/api/live');
  es.addEventListener('tick', (e) => stats(JSON.parse((e as MessageEvent<string>).data) as Stats));
  es.addEventListener('open', () => {
    header.live.textContent = source === 'recording' ? '● recording' : '● live';
    header.live.className = 'live on';
  });
  es.addEventListener('error', () => {
    header.live.textContent = es.readyState === EventSource.CLOSED ? 'disconnected' : 'reconnecting…';
    header.live.className = 'live off';
  });
}

async function start(): Promise<void> {
  try {
    const info = await api.info();
    header.setInfo(info);
    live(info.source);
  } catch (e) {
    error.hidden = false;
    error.textContent = e instanceof Error ? e.message : String(e);
    return;
  }
  await loadSessions();
  api.stats().then((s) => header.setStats(s), () => {});
  apply();
  table.scroller.focus();
}

void start();
