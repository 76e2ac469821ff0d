// The detail pane: one row's decoded message with the contract schema of each part, its
// violation and the contract entry it breaks, the exact bytes (hex dump and text), and
// links to the paired row and the trace.

import { api, HttpError, type Detail, type Part } from './api';
import { h, replace, span, type Child } from './dom';
import { clock, count, hexDump, idText, ms, pointerToken } from './format';

export class DetailPane {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private seq = 0;
  private timer = 0;
  private note = '';
  /** The paired row's link was followed. */
  onPair: (n: number) => void = () => {};
  /** The pane was closed. */
  onClose: () => void = () => {};

  constructor() {
    this.body = h('div', { class: 'detail-body' });
    this.el = h(
      'aside',
      { class: 'detail', 'data-testid': 'detail', 'aria-label': 'row detail', hidden: true },
      h('button', { class: 'close', type: 'button', 'aria-label': 'close the detail', onclick: () => this.onClose() }, '×'),
      this.body,
    );
  }

  /**
   * Show row `n` (after `delay` ms, so that holding an arrow key does not fetch every row),
   * with a `note` above it, or nothing.
   */
  show(n: number | null, delay = 0, note = ''): void {
    clearTimeout(this.timer);
    this.note = note;
    const seq = ++this.seq;
    if (n === null) {
      this.el.hidden = true;
      replace(this.body);
      return;
    }
    this.el.hidden = false;
    this.timer = window.setTimeout(() => void this.load(n, seq), delay);
  }

  private async load(n: number, seq: number): Promise<void> {
    this.el.setAttribute('aria-busy', 'true');
    try {
      const d = await api.row(n);
      if (seq === this.seq) this.render(d);
    } catch (e) {
      if (seq !== this.seq) return;
      const why =
        e instanceof HttpError && e.status === 404
          ? `Row ${n} is no longer kept: the view keeps the newest rows only.`
          : `Cannot load row ${n}: ${e instanceof Error ? e.message : String(e)}`;
      replace(this.body, h('h2', {}, `Row ${n}`), h('p', { class: 'error', role: 'alert' }, why));
    } finally {
      if (seq === this.seq) this.el.removeAttribute('aria-busy');
    }
  }

  private render(d: Detail): void {
    const r = d.row;
    const links: Child[] = [];
    if (d.pair !== null && d.pair !== undefined) {
      const pair = d.pair;
      links.push(
        h(
          'button',
          { type: 'button', class: 'link', 'data-testid': 'pair-link', 'data-pair': pair, onclick: () => this.onPair(pair) },
          `${r.kind === 'request' ? 'answer' : 'request'}: row ${pair}`,
        ),
      );
    }
    if (d.trace_url) {
      links.push(h('a', { href: d.trace_url, target: '_blank', rel: 'noopener noreferrer', 'data-testid': 'trace-link' }, 'trace'));
    }
    const when = new Date(r.time * 1000);
    const facts: [string, Child][] = [
      ['time', h('time', { datetime: when.toISOString(), title: when.toString() }, clock(r.time))],
      ['route', r.route],
      ['session', `${r.session} (connection ${r.conn})`],
      ['channel', r.channel],
      ['direction', `${r.dir}: ${r.from} → ${r.to}`],
      ['kind', r.kind ?? ''],
      ['method', r.method ?? ''],
      ['id', idText(r.id)],
      ['stream', r.stream ? `key ${r.stream[0]}, frame ${r.stream[1]}` : ''],
      ['size', `${count(r.size)} B`],
      ['latency', r.latency === null ? '' : `${ms(r.latency)} ms`],
      ['trace', r.trace ?? ''],
      ['error', r.error === undefined || r.error === null ? '' : JSON.stringify(r.error)],
      ['action', r.action ?? ''],
      ['verdict', r.verdict.verdict === 'ok' ? 'ok' : `${r.verdict.class ?? r.verdict.verdict}: ${r.verdict.reason ?? ''}`],
    ];
    replace(
      this.body,
      h(
        'h2',
        {},
        `Row ${r.n} `,
        span('sub', [r.method, r.kind].filter(Boolean).join(' ')),
      ),
      this.note ? h('p', { class: 'note', 'data-testid': 'detail-note' }, this.note) : null,
      links.length ? h('p', { class: 'links' }, ...links.flatMap((l, i) => (i ? [' · ', l] : [l]))) : null,
      h(
        'dl',
        { class: 'facts' },
        ...facts.filter(([, v]) => v !== '').flatMap(([k, v]) => [h('dt', {}, k), h('dd', { 'data-fact': k }, v)]),
      ),
      this.violation(d),
      this.message(d),
      this.raw(d),
    );
  }

  private violation(d: Detail): Child {
    const v = d.violation;
    if (!v) return null;
    const rows: [string, unknown][] = [
      ['class', v.class],
      ['code', v.code],
      ['seed section', v.seed],
      ['reason', v.reason],
    ];
    const section = h(
      'section',
      { class: 'violation', 'data-testid': 'violation' },
      h('h3', {}, `Violation: ${v.class}`),
      h(
        'dl',
        { class: 'facts' },
        ...rows
          .filter(([, x]) => x !== null && x !== undefined && x !== '')
          .flatMap(([k, x]) => [h('dt', {}, k), h('dd', {}, typeof x === 'string' ? x : JSON.stringify(x))]),
      ),
      h('h4', {}, 'Contract entry ', h('code', { 'data-testid': 'violation-entry' }, v.entry ?? '(none found)')),
    );
    if (v.entry) {
      section.append(h('pre', { class: 'json', 'data-testid': 'violation-contract' }, JSON.stringify(v.contract, null, 2)));
    }
    if (v.action_entry) {
      section.append(
        h('h4', {}, 'What the receiver does ', h('code', { 'data-testid': 'violation-action-entry' }, v.action_entry)),
        h('pre', { class: 'json' }, JSON.stringify(v.action, null, 2)),
      );
    }
    return section;
  }

  private message(d: Detail): Child {
    const parts = new Map(d.parts.map((p) => [p.pointer, p.schema] as const));
    const section = h('section', { class: 'message' }, h('h3', {}, 'Message'));
    if (d.message === null || d.message === undefined) {
      section.append(
        h('p', { class: 'note' }, d.row.stream ? 'A data frame: its bytes are below.' : 'Not decoded: the bytes are below.'),
      );
    } else {
      section.append(jsonTree(d.message, parts));
    }
    if (d.parts.length) section.append(partsList(d.parts));
    return section;
  }

  private raw(d: Detail): Child {
    const b = d.raw;
    const kept = b.hex.length >> 1;
    return h(
      'section',
      { class: 'raw' },
      h('h3', {}, 'Bytes ', span('sub', `${count(b.len)} B`)),
      b.truncated
        ? h(
            'p',
            { class: 'note warn', 'data-testid': 'raw-truncated' },
            `Truncated: the first ${count(kept)} of ${count(b.len)} bytes are kept.`,
          )
        : null,
      h('pre', { class: 'hex', 'data-testid': 'raw-hex' }, hexDump(b.hex)),
      h('h4', {}, 'As text'),
      h('pre', { class: 'text', 'data-testid': 'raw-text' }, b.text),
    );
  }
}

/** The list of parts: pointer in the message, schema in the contract. */
function partsList(parts: Part[]): HTMLElement {
  return h(
    'dl',
    { class: 'parts', 'aria-label': 'the contract schema of each part' },
    ...parts.flatMap((p) => [
      h('dt', {}, h('code', {}, p.pointer === '' ? '(whole message)' : p.pointer)),
      h('dd', {}, h('code', {}, p.schema)),
    ]),
  );
}

/**
 * `value` pretty-printed as JSON, with the schema of each part of `parts` (keyed by JSON
 * Pointer) next to the member it validated.
 */
export function jsonTree(value: unknown, parts: Map<string, string>): HTMLElement {
  const pre = h('pre', { class: 'json', 'data-testid': 'message-json' });
  const out: Node[] = [];
  let text = '';
  const flush = () => {
    if (text) out.push(document.createTextNode(text));
    text = '';
  };
  const push = (n: Node) => {
    flush();
    out.push(n);
  };
  const badge = (ptr: string) => {
    const s = parts.get(ptr);
    if (s === undefined) return;
    text += ' ';
    const b = span('schema', `⟵ ${s}`);
    b.dataset.testid = 'schema-part';
    b.dataset.pointer = ptr;
    b.title = `validated by the contract schema at ${s}`;
    push(b);
  };
  const walk = (v: unknown, ptr: string, indent: string, trail: string) => {
    if (v === null || typeof v !== 'object') {
      push(span(typeof v === 'string' ? 'str' : 'lit', JSON.stringify(v)));
      text += trail;
      badge(ptr);
      return;
    }
    const arr = Array.isArray(v);
    const entries: [string, unknown][] = arr ? v.map((x, i) => [String(i), x]) : Object.entries(v);
    const [open, close] = arr ? ['[', ']'] : ['{', '}'];
    if (!entries.length) {
      text += open + close + trail;
      badge(ptr);
      return;
    }
    text += open;
    badge(ptr);
    const inner = indent + '  ';
    entries.forEach(([k, x], i) => {
      text += '\n' + inner;
      if (!arr) {
        push(span('key', JSON.stringify(k)));
        text += ': ';
      }
      walk(x, `${ptr}/${pointerToken(k)}`, inner, i < entries.length - 1 ? ',' : '');
    });
    text += `\n${indent}${close}${trail}`;
  };
  walk(value, '', '', '');
  flush();
  pre.append(...out);
  return pre;
}
