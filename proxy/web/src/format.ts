// Text formatting for the web view: times, sizes, latencies, ids, verdicts and hex dumps.

import type { Row } from './api';

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** Unix seconds as local `HH:MM:SS.mmm`. */
export function clock(t: number): string {
  const d = new Date(t * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** Milliseconds, with fewer decimals as they grow; empty when absent. */
export function ms(v: number | null | undefined): string {
  if (v === null || v === undefined) return '';
  return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
}

/** A number with thin grouping (1 234 567). */
export function count(n: number): string {
  return n.toLocaleString('en-US').replace(/,/g, '\u202f');
}

/** A message id as the log shows it: strings bare, anything else as JSON. */
export function idText(id: unknown): string {
  if (id === null || id === undefined) return '';
  return typeof id === 'string' ? id : JSON.stringify(id);
}

/** The verdict cell: `ok`, or the violation's class (`framing` for a framing break). */
export function verdictText(r: Row): string {
  const v = r.verdict;
  if (v.verdict === 'ok') return 'ok';
  if (v.verdict === 'framing') return 'framing';
  return v.class ?? 'violation';
}

/** A data frame's method cell: `data` with its key and sequence. */
export function methodText(r: Row): string {
  const m = r.method ?? '';
  return r.stream ? `${m} ${r.stream[0]}#${r.stream[1]}` : m;
}

/** `hexdump -C`-style lines: offset, 16 bytes in two groups of 8, printable text. */
export function hexDump(hex: string): string {
  const n = hex.length >> 1;
  const lines: string[] = [];
  for (let off = 0; off < n; off += 16) {
    let bytes = '';
    let text = '';
    for (let i = 0; i < 16; i++) {
      if (i === 8) bytes += ' ';
      if (off + i < n) {
        const b = parseInt(hex.substr((off + i) * 2, 2), 16);
        bytes += hex.substr((off + i) * 2, 2) + ' ';
        text += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.';
      } else {
        bytes += '   ';
      }
    }
    lines.push(`${off.toString(16).padStart(8, '0')}  ${bytes} |${text}|`);
  }
  return lines.join('\n');
}

/** One JSON Pointer reference token (RFC 6901). */
export function pointerToken(k: string): string {
  return k.replace(/~/g, '~0').replace(/\//g, '~1');
}
