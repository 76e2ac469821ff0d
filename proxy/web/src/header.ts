// The page header: contract, source and mode, the run's counters and a 120 s rate chart.

import type { Info, Stats } from './api';
import { h, replace } from './dom';
import { count } from './format';

const COUNTERS = ['messages', 'violations', 'refused', 'held', 'sent', 'drops', 'evicted'] as const;
const SVG = 'http://www.w3.org/2000/svg';
const SECONDS = 120;
const W = 240;
const H = 32;

export class Header {
  readonly el: HTMLElement;
  private title = h('span', { class: 'contract', 'data-testid': 'contract' }, 'contract-proxy');
  private badges = h('span', { class: 'badges' });
  private values = new Map<string, HTMLElement>();
  private chart = document.createElementNS(SVG, 'svg');
  private bars = document.createElementNS(SVG, 'path');
  private recording = false;
  private peak = h('span', { class: 'peak', 'data-testid': 'rate-peak' });
  readonly live = h('span', { class: 'live', 'data-testid': 'live-status', role: 'status' }, 'connecting…');

  constructor() {
    const counters = h('dl', { class: 'counters' });
    for (const c of COUNTERS) {
      const v = h('dd', { 'data-testid': `counter-${c}` }, '0');
      this.values.set(c, v);
      counters.append(h('div', { class: `counter c-${c}` }, h('dt', {}, c), v));
    }
    this.chart.setAttribute('viewBox', `0 0 ${W} ${H}`);
    this.chart.setAttribute('width', String(W));
    this.chart.setAttribute('height', String(H));
    this.chart.setAttribute('role', 'img');
    this.chart.setAttribute('aria-label', 'messages per second, last 120 s');
    this.chart.setAttribute('data-testid', 'rate-chart');
    this.chart.classList.add('rate');
    this.bars.setAttribute('class', 'bars');
    this.chart.append(this.bars);
    this.el = h(
      'header',
      { class: 'top' },
      h('h1', {}, this.title, this.badges),
      counters,
      h('div', { class: 'chart' }, this.chart, this.peak),
      this.live,
    );
  }

  setInfo(i: Info): void {
    this.recording = i.source === 'recording';
    const name = [i.contract ?? '(no contract)', i.version].filter(Boolean).join(' ');
    this.title.textContent = name;
    document.title = `${name} · contract-proxy`;
    replace(
      this.badges,
      h('span', { class: `badge ${i.source}`, 'data-testid': 'source' }, i.source),
      i.mode && h('span', { class: `badge ${i.mode}`, 'data-testid': 'mode' }, i.mode),
    );
  }

  setStats(s: Stats): void {
    for (const c of COUNTERS) {
      const el = this.values.get(c)!;
      const v = s[c] ?? 0;
      el.textContent = count(v);
      el.parentElement!.classList.toggle('nonzero', v > 0);
    }
    this.drawRate(s.rate ?? []);
  }

  private drawRate(rate: [number, number][]): void {
    const last = rate.length ? rate[rate.length - 1][0] : 0;
    // A run's chart ends now; a recording's at its last second.
    const end = this.recording ? last : Math.max(last, Math.floor(Date.now() / 1000));
    const start = end - SECONDS + 1;
    let max = 0;
    for (const [t, n] of rate) if (t >= start) max = Math.max(max, n);
    const bw = W / SECONDS;
    let d = '';
    if (max > 0) {
      for (const [t, n] of rate) {
        if (t < start || n <= 0) continue;
        const bh = Math.max(1, (n / max) * (H - 4));
        d += `M${((t - start) * bw).toFixed(1)} ${H}v-${bh.toFixed(1)}h${bw.toFixed(2)}v${bh.toFixed(1)}z`;
      }
    }
    this.bars.setAttribute('d', d);
    this.peak.textContent = `${count(max)}/s peak`;
    this.chart.setAttribute('aria-label', `messages per second, last 120 s, peak ${max}`);
  }
}
