// The flow table: a virtualised <table> over /api/rows that pages rows in as it scrolls,
// keeps a bounded cache of pages and follows the tail of a live run.

import { api, HttpError, type Query, type Row } from './api';
import { h } from './dom';
import { clock, count, idText, methodText, ms, verdictText } from './format';

/** Every row is this tall (CSS keeps it so). */
export const ROW_H = 22;
/** Rows per fetched page. */
const PAGE = 100;
/** Rows rendered beyond the visible ones, each side. */
const OVERSCAN = 8;
/** Pages kept around the visible ones; farther pages are dropped. */
const KEEP = 6;
/** The tallest scroll area made; past it a scroll position maps to a row proportionally. */
const MAX_PX = 8_000_000;

const COLS: [string, string][] = [
  ['time', 'time'],
  ['route', 'route'],
  ['session', 'session'],
  ['dir', 'dir'],
  ['channel', 'channel'],
  ['fromto', 'from → to'],
  ['kind', 'kind'],
  ['method', 'method'],
  ['id', 'id'],
  ['size', 'size'],
  ['latency', 'latency'],
  ['verdict', 'verdict'],
];

interface CachedPage {
  rows: Row[];
  /** Rows evicted when it was fetched: offsets shift as the oldest rows go. */
  evicted: number;
}

/** A rendered row element, remembering which row it shows. */
type RowEl = HTMLTableRowElement & { shown?: number };

export class FlowTable {
  readonly el: HTMLElement;
  readonly scroller: HTMLDivElement;
  private table: HTMLTableElement;
  private thead: HTMLTableSectionElement;
  private tbody: HTMLTableSectionElement;
  private topCell: HTMLTableCellElement;
  private bottomCell: HTMLTableCellElement;
  private bottomRow: HTMLTableRowElement;
  private pool: RowEl[] = [];
  private empty: HTMLElement;

  private query: Query = { filters: [], q: '', session: 'all' };
  private gen = 0;
  private failed = false;
  total = 0;
  private evicted = 0;
  private pages = new Map<number, CachedPage>();
  private loading = new Map<number, Promise<void>>();
  follow = true;
  private sel: { index: number; n: number | null } | null = null;
  private totalBusy = false;
  private totalAgain = false;
  private staleAgain = false;
  private frame = 0;
  private headH = 0;
  private visible = 1;
  private lastScroll = 0;

  /** A row was selected (`null`: the selection is gone). */
  onSelect: (n: number | null) => void = () => {};
  /** Following the tail was switched on or off. */
  onFollow: (on: boolean) => void = () => {};
  /** The number of rows that pass the query changed. */
  onTotal: (total: number) => void = () => {};
  /** The server refused the query (its text), or accepts it again (`null`). */
  onError: (text: string | null) => void = () => {};

  constructor() {
    this.thead = h(
      'thead',
      {},
      h(
        'tr',
        { 'aria-rowindex': 1 },
        ...COLS.map(([k, t]) =>
          h('th', { scope: 'col', class: `c-${k}`, title: k === 'latency' ? 'response latency, ms' : null }, t),
        ),
      ),
    );
    this.topCell = h('td', { colspan: COLS.length });
    this.bottomCell = h('td', { colspan: COLS.length });
    this.bottomRow = h('tr', { class: 'spacer', 'aria-hidden': 'true' }, this.bottomCell);
    this.tbody = h('tbody', {}, h('tr', { class: 'spacer', 'aria-hidden': 'true' }, this.topCell), this.bottomRow);
    this.table = h(
      'table',
      { class: 'flows', role: 'grid', 'aria-label': 'flows', 'aria-readonly': 'true', 'aria-rowcount': 1 },
      h('colgroup', {}, ...COLS.map(([k]) => h('col', { class: `c-${k}` }))),
      this.thead,
      this.tbody,
    );
    this.empty = h('div', { class: 'empty', 'data-testid': 'empty' }, 'No rows yet.');
    this.scroller = h(
      'div',
      {
        class: 'scroller',
        tabindex: 0,
        'data-testid': 'table',
        'aria-label': 'flows: arrow keys move the selection',
      },
      this.table,
    );
    this.el = h('div', { class: 'flows-wrap' }, this.scroller, this.empty);

    this.scroller.addEventListener('scroll', () => this.scrolled(), { passive: true });
    this.scroller.addEventListener('keydown', (e) => this.key(e));
    this.tbody.addEventListener('click', (e) => {
      const tr = (e.target as Element).closest<HTMLElement>('tr[data-index]');
      if (tr) this.selectIndex(Number(tr.dataset.index));
    });
    new ResizeObserver(() => {
      this.headH = 0;
      this.schedule();
    }).observe(this.scroller);
  }

  /** Show the rows passing `q`, from scratch. */
  setQuery(q: Query): void {
    this.query = q;
    this.gen++;
    this.pages.clear();
    this.loading.clear();
    this.setTotal(0);
    this.sel = null;
    this.onSelect(null);
    this.scroller.scrollTop = 0;
    this.lastScroll = 0;
    this.render();
    this.refresh(false);
  }

  /** Something changed on the server: count the rows again and fetch what is in view. */
  tick(evicted: number): void {
    this.refresh(evicted !== this.evicted);
  }

  /** Follow the tail (scroll to the newest row as rows come) or stop. */
  setFollow(on: boolean): void {
    if (this.follow === on) return;
    this.follow = on;
    this.onFollow(on);
    if (on) this.schedule();
  }

  /** Where row `n` is among the rows that pass the query, or null. */
  async locate(n: number): Promise<number | null> {
    for (const [p, c] of this.pages) {
      const i = c.rows.findIndex((r) => r.n === n);
      if (i >= 0) return p * PAGE + i;
    }
    // Rows come in order of n: search.
    const gen = this.gen;
    let lo = 0;
    let hi = this.total - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const pg = await api.rows(this.query, mid, 1);
      if (gen !== this.gen || !pg.rows.length) return null;
      const m = pg.rows[0].n;
      if (m === n) return mid;
      if (m < n) lo = mid + 1;
      else hi = mid - 1;
    }
    return null;
  }

  /** Select the row at position `index` (keyboard, click); the caller is told its number. */
  selectIndex(index: number): void {
    if (this.total === 0) return;
    const i = Math.max(0, Math.min(this.total - 1, index));
    const r = this.rowAt(i);
    this.sel = { index: i, n: r ? r.n : null };
    this.setFollow(false);
    this.reveal(i);
    this.schedule();
    if (r) this.onSelect(r.n);
  }

  /** Select row `n`, known to be at `index`. */
  selectRow(n: number, index: number): void {
    this.sel = { index, n };
    this.setFollow(false);
    this.reveal(index);
    this.schedule();
    this.onSelect(n);
  }

  /** The selected row's number. */
  selected(): number | null {
    return this.sel ? this.sel.n : null;
  }

  private rowAt(i: number): Row | undefined {
    return this.pages.get(Math.floor(i / PAGE))?.rows[i % PAGE];
  }

  private refresh(stale: boolean): void {
    this.staleAgain ||= stale;
    if (this.totalBusy) {
      this.totalAgain = true;
      return;
    }
    this.totalBusy = true;
    this.totalAgain = false;
    stale = this.staleAgain;
    this.staleAgain = false;
    const gen = this.gen;
    void this.count(gen, stale).finally(() => {
      this.totalBusy = false;
      if (this.totalAgain) this.refresh(false);
    });
  }

  /** Count the rows; when following, load the new tail first so that it never shows blank. */
  private async count(gen: number, stale: boolean): Promise<void> {
    let pg;
    try {
      pg = await api.rows(this.query, 0, 0);
    } catch (e) {
      if (gen !== this.gen) return;
      this.failed = true;
      this.setTotal(0);
      this.onError(e instanceof HttpError ? e.body : `cannot reach the proxy: ${String(e)}`);
      return;
    }
    if (gen !== this.gen) return;
    if (this.failed) {
      this.failed = false;
      this.onError(null);
    }
    this.evicted = Math.max(this.evicted, pg.evicted);
    if (this.follow && pg.total > 0) {
      const t = pg.total;
      const from = Math.floor(Math.max(0, t - this.geometry().vis - OVERSCAN) / PAGE);
      const waits: Promise<void>[] = [];
      for (let p = from; p <= Math.floor((t - 1) / PAGE); p++) {
        const c = this.pages.get(p);
        const short = c && c.rows.length < PAGE && p * PAGE + c.rows.length < t;
        if (!c || short || (stale && c.evicted !== this.evicted)) waits.push(this.load(p));
      }
      await Promise.all(waits);
      if (gen !== this.gen) return;
    }
    this.setTotal(pg.total);
    this.render(stale);
  }

  private setTotal(t: number): void {
    if (t === this.total) return;
    this.total = t;
    if (this.sel && this.sel.index >= t) this.sel.index = Math.max(0, t - 1);
    this.table.setAttribute('aria-rowcount', String(t + 1));
    this.onTotal(t);
    this.schedule();
  }

  private schedule(): void {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  /** Geometry of the scroll area: rows visible, content height, whether it is scaled. */
  private geometry() {
    if (!this.headH) this.headH = this.thead.offsetHeight || ROW_H;
    const viewH = Math.max(0, this.scroller.clientHeight - this.headH);
    const vis = Math.max(1, Math.ceil(viewH / ROW_H));
    const full = this.total * ROW_H;
    const scaled = full > MAX_PX;
    const contentH = scaled ? MAX_PX : full;
    // Rows the scroll range spans (scaled mode): the last screenful ends at the last row.
    const span = Math.max(0, this.total - viewH / ROW_H);
    return { viewH, vis, scaled, contentH, span, maxScroll: Math.max(0, contentH - viewH) };
  }

  /** Draw the rows in view and fetch the pages they need (`stale`: also the evicted-shifted ones). */
  private render(stale = false): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    // A scroll the user made since the last render decides first (its event may not have come yet).
    this.userScroll();
    const g = this.geometry();
    this.visible = g.vis;
    const st = this.follow ? g.maxScroll : Math.min(this.scroller.scrollTop, g.maxScroll);
    let first: number;
    let start: number;
    let top: number;
    if (!g.scaled) {
      first = Math.floor(st / ROW_H);
      start = Math.max(0, first - OVERSCAN);
      top = start * ROW_H;
    } else {
      // Scaled: the scroll position picks a (fractional) row; rows move with the pixels.
      const pos = g.maxScroll > 0 ? (st / g.maxScroll) * g.span : 0;
      first = Math.floor(pos);
      start = first;
      top = Math.max(0, st - (pos - first) * ROW_H);
    }
    const end = Math.min(this.total, first + g.vis + OVERSCAN);
    start = Math.min(start, end);
    this.topCell.style.height = `${top}px`;
    this.bottomCell.style.height = `${Math.max(0, g.contentH - top - (end - start) * ROW_H)}px`;
    this.fill(start, end);
    if (this.follow && Math.abs(this.scroller.scrollTop - st) >= 1) {
      this.lastScroll = st;
      this.scroller.scrollTop = st;
    }
    this.empty.hidden = this.total > 0 || this.failed;
    this.empty.textContent =
      this.query.filters.length || this.query.q || this.query.session !== 'all'
        ? 'No rows match.'
        : 'No rows yet.';
    this.fetch(start, end, stale);
  }

  private fill(start: number, end: number): void {
    const want = end - start;
    while (this.pool.length < want) {
      const tr: RowEl = document.createElement('tr');
      for (const [k] of COLS) tr.append(h('td', { class: `c-${k}` }));
      this.tbody.insertBefore(tr, this.bottomRow);
      this.pool.push(tr);
    }
    while (this.pool.length > want) this.pool.pop()!.remove();
    let active = '';
    for (let i = start; i < end; i++) {
      const tr = this.pool[i - start];
      const r = this.rowAt(i);
      const key = r ? r.n : -1 - i;
      if (tr.shown !== key) {
        tr.shown = key;
        if (r) this.paint(tr, r);
        else this.blank(tr);
      }
      tr.dataset.index = String(i);
      tr.setAttribute('aria-rowindex', String(i + 2));
      const s = this.sel;
      if (s && r && s.n === r.n && s.index !== i) s.index = i;
      if (s && s.n === null && s.index === i && r) {
        s.n = r.n;
        this.onSelect(r.n);
      }
      const on = !!s && (r ? s.n === r.n : s.index === i);
      if (on) active = tr.id;
      if (tr.classList.contains('sel') !== on) {
        tr.classList.toggle('sel', on);
        tr.setAttribute('aria-selected', String(on));
      }
    }
    if (active) this.scroller.setAttribute('aria-activedescendant', active);
    else this.scroller.removeAttribute('aria-activedescendant');
  }

  private paint(tr: RowEl, r: Row): void {
    const c = tr.cells;
    const v = verdictText(r);
    tr.id = `row-${r.n}`;
    tr.className = r.verdict.verdict === 'ok' ? '' : `bad ${r.verdict.verdict}`;
    tr.dataset.testid = 'row';
    tr.dataset.n = String(r.n);
    tr.dataset.verdict = r.verdict.verdict;
    tr.setAttribute('aria-selected', 'false');
    c[0].textContent = clock(r.time);
    c[1].textContent = r.route;
    c[2].textContent = String(r.session);
    c[3].textContent = r.dir === 'up' ? '↑' : '↓';
    c[3].title = r.dir;
    c[4].textContent = r.channel;
    c[5].textContent = `${r.from} → ${r.to}`;
    c[6].textContent = r.kind ?? '';
    c[7].textContent = methodText(r);
    c[8].textContent = idText(r.id);
    c[9].textContent = count(r.size);
    c[10].textContent = ms(r.latency);
    c[11].textContent = v;
    c[11].title = r.verdict.reason ?? '';
  }

  private blank(tr: RowEl): void {
    tr.removeAttribute('id');
    tr.className = 'pending';
    tr.dataset.testid = 'row-pending';
    delete tr.dataset.n;
    delete tr.dataset.verdict;
    for (const td of Array.from(tr.cells)) {
      td.textContent = '';
      td.title = '';
    }
    tr.cells[0].textContent = '…';
  }

  /** Fetch the pages rows [start, end) need (and the next page when near its edge); drop far ones. */
  private fetch(start: number, end: number, stale: boolean): void {
    if (this.total === 0) return;
    const last = Math.floor((this.total - 1) / PAGE);
    const ahead = PAGE >> 2;
    const p0 = Math.floor(Math.max(0, start - ahead) / PAGE);
    const p1 = Math.min(last, Math.floor((Math.max(start, end - 1) + ahead) / PAGE));
    for (let p = p0; p <= p1; p++) {
      const c = this.pages.get(p);
      const short = c && c.rows.length < PAGE && p * PAGE + c.rows.length < this.total;
      if ((!c || short || (stale && c.evicted !== this.evicted)) && !this.loading.has(p)) void this.load(p);
    }
    for (const p of this.pages.keys()) if (p < p0 - KEEP || p > p1 + KEEP) this.pages.delete(p);
  }

  /** Fetch page `p` (once at a time). */
  private load(p: number): Promise<void> {
    const busy = this.loading.get(p);
    if (busy) return busy;
    const gen = this.gen;
    const done = api.rows(this.query, p * PAGE, PAGE).then(
      (pg) => {
        if (gen !== this.gen) return;
        this.loading.delete(p);
        this.pages.set(p, { rows: pg.rows, evicted: pg.evicted });
        this.evicted = Math.max(this.evicted, pg.evicted);
        this.schedule();
      },
      (e: unknown) => {
        if (gen !== this.gen) return;
        this.loading.delete(p);
        if (e instanceof HttpError && e.status === 400) {
          this.failed = true;
          this.onError(e.body);
        }
      },
    );
    this.loading.set(p, done);
    return done;
  }

  private scrolled(): void {
    this.userScroll();
    this.schedule();
  }

  /** If the user moved the scroll position: follow when they are at the bottom, else stop. */
  private userScroll(): void {
    const top = this.scroller.scrollTop;
    if (Math.abs(top - this.lastScroll) >= 1) {
      const max = this.scroller.scrollHeight - this.scroller.clientHeight;
      this.setFollow(top >= max - ROW_H / 2);
    }
    this.lastScroll = top;
  }

  /** Scroll so that row `i` is in view. */
  private reveal(i: number): void {
    const g = this.geometry();
    const s = this.scroller;
    let top = s.scrollTop;
    if (g.scaled) {
      top = (Math.max(0, i - (g.vis >> 1)) / Math.max(1, g.span)) * g.maxScroll;
    } else if (i * ROW_H < top) {
      top = i * ROW_H;
    } else if ((i + 1) * ROW_H > top + g.viewH) {
      top = (i + 1) * ROW_H - g.viewH;
    }
    top = Math.max(0, Math.min(g.maxScroll, top));
    if (Math.abs(top - s.scrollTop) >= 1) {
      this.lastScroll = top;
      s.scrollTop = top;
    }
  }

  private key(e: KeyboardEvent): void {
    const cur = this.sel ? this.sel.index : -1;
    const page = Math.max(1, this.visible - 1);
    let to: number;
    switch (e.key) {
      case 'ArrowDown':
        to = cur < 0 ? this.firstVisible() : cur + 1;
        break;
      case 'ArrowUp':
        to = cur < 0 ? this.firstVisible() : cur - 1;
        break;
      case 'PageDown':
        to = cur + page;
        break;
      case 'PageUp':
        to = cur - page;
        break;
      case 'Home':
        to = 0;
        break;
      case 'End':
        to = this.total - 1;
        break;
      default:
        return;
    }
    e.preventDefault();
    this.selectIndex(to);
  }

  private firstVisible(): number {
    const g = this.geometry();
    if (g.scaled) return Math.ceil((this.scroller.scrollTop / Math.max(1, g.maxScroll)) * g.span);
    return Math.floor(this.scroller.scrollTop / ROW_H);
  }
}
