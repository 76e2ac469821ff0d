// The Diagram tab: a session's sequence diagram, inlined from /api/diagram (SVG, with
// scripts and event handlers stripped), and links to download it as Mermaid or SVG.

import { api, HttpError } from './api';
import { h, replace } from './dom';

export class DiagramView {
  readonly el: HTMLElement;
  private box: HTMLElement;
  private title: HTMLElement;
  private mermaid: HTMLAnchorElement;
  private svgLink: HTMLAnchorElement;
  private session: number | null = null;
  private seq = 0;

  constructor() {
    this.box = h('div', { class: 'diagram', 'data-testid': 'diagram', 'aria-live': 'polite' });
    this.title = h('h2', { 'data-testid': 'diagram-title' }, 'Sequence diagram');
    this.mermaid = h('a', { 'data-testid': 'download-mermaid' }, 'Mermaid');
    this.svgLink = h('a', { 'data-testid': 'download-svg' }, 'SVG');
    this.el = h(
      'section',
      { class: 'diagram-panel' },
      h(
        'div',
        { class: 'diagram-bar' },
        this.title,
        h('span', { class: 'downloads' }, 'Download: ', this.mermaid, ' · ', this.svgLink),
        h('button', { type: 'button', 'data-testid': 'diagram-refresh', onclick: () => void this.load() }, 'Refresh'),
      ),
      this.box,
    );
  }

  /** Show session `s` (null: there is none yet). */
  async show(s: number | null): Promise<void> {
    this.session = s;
    await this.load();
  }

  private async load(): Promise<void> {
    const s = this.session;
    const seq = ++this.seq;
    if (s === null) {
      this.title.textContent = 'Sequence diagram';
      this.setLinks(null);
      replace(this.box, h('p', { class: 'note' }, 'No session yet.'));
      return;
    }
    this.title.textContent = `Session ${s}`;
    this.setLinks(s);
    this.box.setAttribute('aria-busy', 'true');
    try {
      const text = await api.diagram(s);
      if (seq !== this.seq) return;
      const svg = cleanSvg(text);
      replace(this.box, svg ?? h('p', { class: 'error' }, 'The diagram is not valid SVG.'));
      this.box.dataset.arrows = String(svg ? svg.querySelectorAll('g.arrow').length : 0);
    } catch (e) {
      if (seq !== this.seq) return;
      replace(this.box, h('p', { class: 'error', role: 'alert' }, e instanceof HttpError ? e.body : String(e)));
    } finally {
      if (seq === this.seq) this.box.removeAttribute('aria-busy');
    }
  }

  private setLinks(s: number | null): void {
    for (const [a, f, ext] of [
      [this.mermaid, 'mermaid', 'mmd'],
      [this.svgLink, 'svg', 'svg'],
    ] as const) {
      if (s === null) {
        a.removeAttribute('href');
        a.removeAttribute('download');
      } else {
        a.href = api.diagramUrl(s, f);
        a.download = `session-${s}.${ext}`;
      }
    }
  }
}

/** Parse SVG text into an element of this document, without scripts, handlers or script links. */
export function cleanSvg(text: string): SVGSVGElement | null {
  const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
  const root = doc.documentElement;
  if (root.nodeName !== 'svg' || doc.getElementsByTagName('parsererror').length) return null;
  for (const bad of Array.from(root.querySelectorAll('script, foreignObject, iframe, object, embed'))) bad.remove();
  for (const el of [root, ...Array.from(root.querySelectorAll('*'))]) {
    for (const a of Array.from(el.attributes)) {
      const v = a.value.trim().toLowerCase();
      if (a.name.toLowerCase().startsWith('on') || (a.name.endsWith('href') && v.startsWith('javascript:'))) {
        el.removeAttribute(a.name);
      }
    }
  }
  return document.importNode(root, true) as unknown as SVGSVGElement;
}
