#!/usr/bin/env node
// Browser test of the contract-proxy web view (docs/web.md, proxy/web/): runs the proxy
// with --web in front of the kernel and toolchannel reference peers and on a recording,
// drives Debian's Chromium through playwright-core, and checks the page against the API.
//
//   node proxy/web/tests/browser.mjs
//
// Env: BIN (the binaries' directory; default target/debug), CHROMIUM (default
// /usr/bin/chromium), PY (a Python with `websockets` for the toolchannel worker; default
// .venv-peers/bin/python). Screenshots go to target/web-test/screenshots/, the children's
// output to target/web-test/logs/. Every wait has a deadline; every child is killed at the
// end, also on failure. Exits non-zero when a check fails.

import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const BIN = path.resolve(process.env.BIN || path.join(ROOT, 'target/debug'));
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const OUT = path.join(ROOT, 'target/web-test');
const SHOTS = path.join(OUT, 'screenshots');
const LOGS = path.join(OUT, 'logs');
const DIST = path.join(ROOT, 'proxy/web/dist');
const PROXY = path.join(BIN, 'contract-proxy');
const KERNEL = path.join(BIN, 'kernel-peer');
const TC_HOST = path.join(BIN, 'toolchannel-host');
const CONTRACTGEN = path.join(BIN, 'contractgen');
const PEERS_PY = process.env.PY || path.join(ROOT, '.venv-peers/bin/python');
const PROM_CLIENT = 'prometheus-client==0.26.0';
/** The whole run's deadline. */
const RUN_DEADLINE_MS = 8 * 60 * 1000;

fs.mkdirSync(SHOTS, { recursive: true });
fs.mkdirSync(LOGS, { recursive: true });
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'cp-web-test-'));

// ---------------------------------------------------------------- children

const children = new Set();

/** Start `cmd args`, its output kept (and written to target/web-test/logs/NAME.log). */
function run(name, cmd, args, opts = {}) {
  const log = fs.createWriteStream(path.join(LOGS, `${name}.log`));
  log.write(`$ ${cmd} ${args.join(' ')}\n`);
  const child = spawn(cmd, args, {
    cwd: opts.cwd || ROOT,
    env: { ...process.env, ...(opts.env || {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = { name, child, out: '', err: '', exited: null };
  const keep = (k) => (d) => {
    log.write(d);
    if (proc[k].length < 4 << 20) proc[k] += d;
  };
  child.stdout.on('data', keep('out'));
  child.stderr.on('data', keep('err'));
  proc.exit = new Promise((res) => {
    child.on('error', (e) => {
      proc.err += `spawn failed: ${e.message}\n`;
      proc.exited = { code: null, signal: null, error: e.message };
      children.delete(proc);
      res(proc.exited);
    });
    child.on('exit', (code, signal) => {
      proc.exited = { code, signal };
      children.delete(proc);
      res(proc.exited);
    });
  });
  children.add(proc);
  return proc;
}

/** Stop a child: SIGTERM, then SIGKILL after 3 s. */
async function stop(proc) {
  if (!proc || proc.exited) return proc && proc.exited;
  proc.child.kill('SIGTERM');
  const t = setTimeout(() => proc.child.kill('SIGKILL'), 3000);
  const r = await proc.exit;
  clearTimeout(t);
  return r;
}

function killAll() {
  for (const p of children) {
    try {
      p.child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    console.log(`\n${sig}: stopping`);
    killAll();
    process.exit(130);
  });
}
const deadline = setTimeout(() => {
  console.log(`FAIL the whole run took longer than ${RUN_DEADLINE_MS / 1000} s`);
  killAll();
  process.exit(1);
}, RUN_DEADLINE_MS);
deadline.unref();

// ---------------------------------------------------------------- checks

class CheckFailed extends Error {}
let failures = 0;
let passes = 0;

const show = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

/** A check: passes, or fails the section saying what was expected and what came. */
function expect(name, ok, expected, got) {
  if (!ok) throw new CheckFailed(`${name}\n    expected: ${expected}\n    got:      ${show(got)}`);
  passes++;
  const g = got === undefined ? '' : show(got).replace(/\s+/g, ' ').trim();
  console.log(`PASS ${name}${g ? `: ${g.length > 160 ? `${g.slice(0, 160)}…` : g}` : ''}`);
}

async function section(name, fn) {
  console.log(`\n== ${name}`);
  try {
    await fn();
  } catch (e) {
    failures++;
    console.log(`FAIL ${e instanceof CheckFailed ? e.message : `${name}: ${e && e.stack ? e.stack : e}`}`);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Poll `fn` until it returns something truthy, at most `ms`; a CheckFailed it throws ends
 * the wait at once (a child died), other errors count as "not yet".
 */
async function waitFor(what, fn, ms = 15000, every = 100) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      if (e instanceof CheckFailed) throw e;
      last = e;
    }
    await sleep(every);
  }
  const l = last instanceof Error ? last.message : show(last);
  throw new CheckFailed(`${what}\n    expected: within ${ms / 1000} s\n    got:      timed out (last: ${l})`);
}

/** Fail at once when `proc` has exited. */
function alive(proc) {
  if (proc.exited) {
    throw new CheckFailed(
      `${proc.name} running\n    expected: still running\n    got:      exited ${show(proc.exited)}; stderr: ${proc.err.slice(-1500)}`,
    );
  }
}

// ---------------------------------------------------------------- helpers

async function http(url, opts = {}) {
  const r = await fetch(url, { headers: opts.headers || {}, signal: AbortSignal.timeout(10000) });
  const body = await r.text();
  return { status: r.status, body, headers: r.headers };
}

async function api(base, p) {
  const r = await http(new URL(p, base).href);
  if (r.status !== 200) throw new Error(`GET ${p}: ${r.status} ${r.body}`);
  return JSON.parse(r.body);
}

/** The URL a proxy prints on stderr: `contract-proxy: web: http://…/`. */
async function webUrl(proc) {
  return waitFor(`${proc.name} to print "contract-proxy: web: URL"`, () => {
    alive(proc);
    const m = proc.err.match(/contract-proxy: web: (http:\/\/\S+)/);
    return m && m[1];
  });
}

function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

function kernelToml(dir) {
  return `mode = "observe"
[[route]]
name = "control"
contract = "kernel"
channel = "control"
listen = "unix:${dir}/pc.sock"
upstream = "unix:${dir}/sc.sock"
[[route]]
name = "data"
contract = "kernel"
channel = "data"
listen = "unix:${dir}/pd.sock"
upstream = "unix:${dir}/sd.sock"
`;
}

/** Start a kernel shell in `dir` and wait for its sockets. */
/** `contract-proxy run` with the web view on a free loopback port, and `args` before it. */
function webProxy(name, args) {
  return run(name, PROXY, ['run', ...args, '--log', 'json', '--web', '127.0.0.1:0']);
}

async function kernelShell(name, dir, extra = []) {
  const shell = run(name, KERNEL, [
    'shell',
    '--control',
    `unix:${dir}/sc.sock`,
    '--data',
    `unix:${dir}/sd.sock`,
    '--sessions',
    '1',
    ...extra,
  ]);
  await waitFor(`${name} to listen on ${dir}/sc.sock and sd.sock`, () => {
    alive(shell);
    return fs.existsSync(`${dir}/sc.sock`) && fs.existsSync(`${dir}/sd.sock`);
  });
  return shell;
}

// ---------------------------------------------------------------- the page

let browser;

/** A page on `url`, recording its errors and every request it makes. */
async function openPage(ctx, url) {
  const page = await ctx.newPage();
  page.errorsSeen = [];
  page.requestsSeen = [];
  page.on('pageerror', (e) => page.errorsSeen.push(e.message));
  page.on('request', (r) => page.requestsSeen.push(r.url()));
  page.setDefaultTimeout(15000);
  const resp = await page.goto(url);
  page.status = resp ? resp.status() : 0;
  return page;
}

/** The page asked nothing of any other origin and threw nothing. */
function pageClean(page, origin, name) {
  const foreign = page.requestsSeen.filter((u) => !u.startsWith(origin) && !u.startsWith('data:'));
  expect(`${name}: no request leaves ${origin}`, foreign.length === 0, 'only same-origin requests', foreign);
  expect(`${name}: no script errors`, page.errorsSeen.length === 0, 'none', page.errorsSeen);
}

const total = (page) => page.$eval('[data-testid=row-count]', (el) => Number(el.dataset.total));
const counter = (page, c) =>
  page.$eval(`[data-testid=counter-${c}]`, (el) => Number(el.textContent.replace(/\D/g, '')));
const shot = async (page, name) => {
  const p = path.join(SHOTS, `${name}.png`);
  await page.screenshot({ path: p });
  console.log(`     screenshot ${path.relative(ROOT, p)}`);
};
/** The rendered, loaded rows: n and the text of each cell. */
const renderedRows = (page) =>
  page.$$eval('[data-testid=row]', (trs) =>
    trs.map((tr) => ({
      n: Number(tr.dataset.n),
      verdict: tr.dataset.verdict,
      cells: Array.from(tr.cells, (td) => td.textContent),
      color: getComputedStyle(tr.cells[tr.cells.length - 1]).color,
    })),
  );
const METHOD = 7;
const VERDICT = 11;

/** Type a filter and a search text and apply them. */
async function query(page, filter, search = '') {
  await page.fill('[data-testid=filter]', filter);
  await page.fill('[data-testid=search]', search);
  await page.click('[data-testid=apply]');
}

/** Wait until the page's row count is the API's for the same query (and > 0 when `some`). */
async function sameTotal(page, base, params, what, some = true) {
  let want = -1;
  await waitFor(`${what}: the page's row count to be /api/rows?${params}'s total`, async () => {
    want = (await api(base, `api/rows?limit=0&${params}`)).total;
    return (await total(page)) === want && (!some || want > 0);
  });
  expect(`${what}: row count = /api/rows?${params} total`, true, '', want);
  return want;
}

/** Arrow count of an SVG text, and of a Mermaid sequence diagram's message lines. */
const svgArrows = (svg) => (svg.match(/<g class="arrow"/g) || []).length;
const mermaidArrows = (mmd) =>
  mmd.split('\n').filter((l) => /^\s*[^\s:]+?\s*(-{1,2}(>>|>|x|\))[+-]?)\s*[^\s:]+\s*:/.test(l)).length;

/** Open the Diagram tab for the page's session and compare it with the API's. */
async function checkDiagram(page, base, session, what) {
  await page.click('[data-testid=tab-diagram]');
  const svg = (await http(new URL(`api/diagram?session=${session}&format=svg`, base).href)).body;
  const mmd = (await http(new URL(`api/diagram?session=${session}&format=mermaid`, base).href)).body;
  const want = svgArrows(svg);
  let box;
  try {
    await waitFor(`${what}: the diagram to render`, async () => {
      box = await page.$eval('[data-testid=diagram]', (el) => ({
        busy: el.hasAttribute('aria-busy'),
        svg: !!el.querySelector('svg'),
        text: el.textContent.slice(0, 200),
      }));
      return !box.busy && box.svg;
    });
  } catch (e) {
    e.message += ` (the diagram box: ${show(box)})`;
    throw e;
  }
  const got = await page.locator('[data-testid=diagram] svg g.arrow').count();
  expect(`${what}: diagram has arrows`, want > 0, '> 0 <g class="arrow"> in /api/diagram?format=svg', want);
  expect(`${what}: page diagram arrows = /api/diagram svg arrows`, got === want, want, got);
  const lines = mermaidArrows(mmd);
  expect(`${what}: svg arrows = Mermaid arrow lines`, lines === want, want, lines);
  const links = await page.$$eval('[data-testid^=download-]', (as) => as.map((a) => a.getAttribute('href')));
  expect(
    `${what}: download links`,
    links.includes(`/api/diagram?session=${session}&format=mermaid`) && links.includes(`/api/diagram?session=${session}&format=svg`),
    'Mermaid and SVG links for the session',
    links,
  );
}

// ---------------------------------------------------------------- sections

const state = {};

async function preflight() {
  for (const [what, p] of [
    ['contract-proxy', PROXY],
    ['kernel-peer', KERNEL],
    ['toolchannel-host', TC_HOST],
    ['contractgen', CONTRACTGEN],
    ['Chromium', CHROMIUM],
  ]) {
    const ok = fs.existsSync(p);
    expect(`${what}`, ok, `${p} (cargo build --workspace; apt-get install chromium)`, ok ? p : `${p} missing`);
  }
  const help = execFileSync(PROXY, ['run', '--help'], { encoding: 'utf8' });
  const web = help.includes('--web');
  expect('contract-proxy run has --web', web, '--web in `contract-proxy run --help`', web ? 'yes' : 'absent');
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--no-proxy-server'] });
  expect('Chromium starts', true, '', browser.version());
}

async function kernel() {
  const dir = fs.mkdtempSync(path.join(TMP, 'k-'));
  fs.writeFileSync(`${dir}/proxy.toml`, kernelToml(dir));
  const shell = await kernelShell('kernel-shell', dir, ['--speak', '2']);
  const rec = `${dir}/s.cprec`;
  const proxy = webProxy('kernel-proxy', ['--config', `${dir}/proxy.toml`, '--record', rec]);
  let core;
  try {
    const base = await webUrl(proxy);
    expect('kernel: URL on loopback has no token', !base.includes('token='), 'http://127.0.0.1:PORT/', base);
    const origin = new URL(base).origin;

    // The binary serves the committed dist, byte for byte.
    for (const f of ['index.html', 'assets/app.js', 'assets/app.css']) {
      const served = (await http(new URL(f === 'index.html' ? '/' : `/${f}`, base).href)).body;
      const built = fs.readFileSync(path.join(DIST, f), 'utf8');
      expect(
        `served ${f} = proxy/web/dist/${f}`,
        served === built,
        'the same bytes (else the binary embeds an older dist: cargo build -p contract-proxy)',
        `${served.length} bytes vs ${built.length}`,
      );
    }

    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await openPage(ctx, base);
    await waitFor('kernel: the header names the contract', async () =>
      (await page.textContent('[data-testid=contract]')).startsWith('kernel'),
    );
    await page.evaluate(() => (window.__noReload = true));
    expect('kernel: no rows before the core runs', (await total(page)) === 0, 0, await total(page));
    await shot(page, '01-kernel-waiting');

    // The core runs: rows come in while the page is open.
    core = run('kernel-core', KERNEL, ['core', '--control', `unix:${dir}/pc.sock`, '--data', `unix:${dir}/pd.sock`]);
    const seen = [];
    await waitFor(
      'kernel: the core to open and close its audio stream (stream.close in /api/rows)',
      async () => {
        alive(core);
        seen.push(await total(page));
        return (await api(base, 'api/rows?limit=0&filter=method=stream.close')).total >= 1;
      },
      30000,
      50,
    );
    // The script's burst takes a few ms; then the shell and the core ping every 5 s: watch
    // the count go up again without reloading.
    await waitFor(
      'kernel: the row count to change at least twice (the burst, then the pings)',
      async () => {
        alive(core);
        seen.push(await total(page));
        return new Set(seen.filter((v) => v > 0)).size >= 2;
      },
      20000,
      100,
    );
    const distinct = [...new Set(seen)];
    const rising = seen.every((v, i) => i === 0 || v >= seen[i - 1]);
    expect(
      'kernel: rows appear live (the row count grows while the core runs)',
      distinct.length >= 3 && rising && distinct.at(-1) > 0,
      'at least 3 distinct, rising row counts',
      distinct.join(' → '),
    );
    const same = await page.evaluate(() => window.__noReload === true);
    expect('kernel: the page was not reloaded', same, 'the same document', same ? 'the same document' : 'reloaded');
    const all = await sameTotal(page, base, '', 'kernel: all rows');
    const dom = (await renderedRows(page)).length;
    const inDom = await page.locator('tbody tr:not(.spacer)').count();
    expect('kernel: rows in the table', dom > 0, '> 0 rendered rows', dom);
    expect('kernel: the table is virtualised', inDom < all, `fewer <tr> than the ${all} rows`, `${inDom} <tr> for ${all} rows`);
    const rowH = await page.$$eval('[data-testid=row]', (trs) => [...new Set(trs.map((t) => t.getBoundingClientRect().height))]);
    expect('kernel: fixed row height', rowH.length === 1, 'one height', rowH);
    const tail = await waitFor('kernel: the newest row rendered (following the tail)', async () => {
      const t = await api(base, 'api/rows?limit=0');
      const lastN = (await api(base, `api/rows?offset=${t.total - 1}&limit=1`)).rows[0].n;
      return Math.max(...(await renderedRows(page)).map((r) => r.n)) === lastN && lastN;
    });
    expect('kernel: follows the tail', true, '', `row ${tail}`);
    await waitFor('kernel: counter-messages = /api/stats messages', async () => {
      const s = await api(base, 'api/stats');
      return (await counter(page, 'messages')) === s.messages && s.messages > 0;
    });
    expect('kernel: counters', true, '', `messages ${await counter(page, 'messages')}`);
    const bars = await page.$eval('[data-testid=rate-chart] path', (p) => (p.getAttribute('d') || '').length);
    expect('kernel: the rate chart has bars', bars > 0, 'a non-empty path', bars);
    await shot(page, '02-kernel-live');

    // Follow: scrolling up stops it, the toggle brings the tail back.
    await page.hover('[data-testid=table]');
    await page.mouse.wheel(0, -100000);
    await waitFor('kernel: scrolling up turns follow off', () => page.isChecked('[data-testid=follow]').then((c) => !c));
    expect('kernel: follow off after scrolling up', true, '', 'off');
    const topN = Math.min(...(await renderedRows(page)).map((r) => r.n));
    expect('kernel: scrolled to the first rows', topN === 0, 'row 0 rendered', topN);
    await page.check('[data-testid=follow]');
    await waitFor('kernel: follow on brings the tail back', async () => {
      const n = (await api(base, `api/rows?offset=${(await total(page)) - 1}&limit=1`)).rows[0].n;
      return Math.max(...(await renderedRows(page)).map((r) => r.n)) === n;
    });
    expect('kernel: follow on shows the newest row', true, '', 'ok');

    // A filter leaves only matching rows.
    await query(page, 'method=stream.open');
    const opens = await sameTotal(page, base, 'filter=method%3Dstream.open', 'kernel: filter method=stream.open');
    await waitFor('kernel: the filtered rows to render', async () => (await renderedRows(page)).length === opens);
    const methods = [...new Set((await renderedRows(page)).map((r) => r.cells[METHOD]))];
    expect('kernel: only stream.open rows', methods.length === 1 && methods[0] === 'stream.open', '[stream.open]', methods);
    await shot(page, '03-kernel-filter');

    // The free-text search.
    await query(page, '', 'stream.credit');
    await sameTotal(page, base, 'q=stream.credit', 'kernel: search q=stream.credit');

    // A bad filter key: the server's 400 text is shown.
    await query(page, 'foo=bar');
    const bad = await http(new URL('api/rows?limit=0&filter=foo%3Dbar', base).href);
    expect('kernel: /api/rows with filter foo=bar is refused', bad.status === 400, 400, bad.status);
    await page.waitForSelector('[data-testid=filter-error]:not([hidden])');
    const errText = (await page.textContent('[data-testid=filter-error]')).trim();
    expect('kernel: the bad filter message is shown', errText === bad.body.trim(), bad.body.trim(), errText);
    await shot(page, '04-kernel-bad-filter');
    await page.click('[data-testid=clear]');
    await page.waitForSelector('[data-testid=filter-error][hidden]', { state: 'attached' });
    await sameTotal(page, base, '', 'kernel: cleared filters');

    // The detail of a response: message with schema parts, bytes, pair.
    await query(page, 'kind=response');
    await sameTotal(page, base, 'filter=kind%3Dresponse', 'kernel: filter kind=response');
    await page.uncheck('[data-testid=follow]');
    await page.evaluate(() => (document.querySelector('[data-testid=table]').scrollTop = 0));
    await waitFor('kernel: the first response row', async () => (await renderedRows(page)).some((r) => r.n >= 0));
    const first = (await api(base, 'api/rows?limit=1&filter=kind%3Dresponse')).rows[0];
    await page.click(`[data-testid=row][data-n="${first.n}"]`);
    const d = await api(base, `api/rows/${first.n}`);
    await waitFor('kernel: the detail of the clicked row', async () =>
      (await page.textContent('[data-testid=detail] h2')).startsWith(`Row ${first.n}`),
    );
    const hex = await page.textContent('[data-testid=raw-hex]');
    const hexLines = hex.split('\n').length;
    expect('kernel: hex dump lines', hexLines === Math.ceil(d.raw.hex.length / 32), Math.ceil(d.raw.hex.length / 32), hexLines);
    expect(
      'kernel: hex dump starts with the bytes',
      hex.startsWith(`00000000  ${d.raw.hex.slice(0, 2)} ${d.raw.hex.slice(2, 4)}`),
      `00000000  ${d.raw.hex.slice(0, 2)} ${d.raw.hex.slice(2, 4)} …`,
      hex.slice(0, 30),
    );
    const text = await page.textContent('[data-testid=raw-text]');
    expect('kernel: raw text', text === d.raw.text, d.raw.text.slice(0, 80), text.slice(0, 80));
    const badges = await page.$$eval('[data-testid=schema-part]', (b) => b.map((x) => [x.dataset.pointer, x.textContent]));
    expect(
      'kernel: each part\'s schema next to its member',
      d.parts.length > 0 && d.parts.every((p) => badges.some(([ptr, t]) => ptr === p.pointer && t.includes(p.schema))),
      d.parts.map((p) => `${p.pointer || '(root)'} ⟵ ${p.schema}`).join(', '),
      badges.map(([p, t]) => `${p || '(root)'} ${t}`).join(', '),
    );
    await shot(page, '05-kernel-detail');
    expect(
      'kernel: a response pairs with its request (by correlation_id)',
      d.pair !== null,
      `the row of request ${d.message && d.message.correlation_id}`,
      `pair ${d.pair}`,
    );
    if (d.pair !== null) {
      await page.click('[data-testid=pair-link]');
      await waitFor('kernel: the pair link shows the paired row', async () =>
        (await page.textContent('[data-testid=detail] h2')).startsWith(`Row ${d.pair}`),
      );
      expect('kernel: pair link', true, '', `row ${d.pair}`);
    }

    // Keyboard: down and up move the selection.
    await page.click('[data-testid=clear]');
    await sameTotal(page, base, '', 'kernel: cleared again');
    await page.uncheck('[data-testid=follow]');
    await page.evaluate(() => (document.querySelector('[data-testid=table]').scrollTop = 0));
    await waitFor('kernel: row 0 rendered', async () => (await renderedRows(page)).some((r) => r.n === 0));
    await page.click('[data-testid=row][data-n="2"]');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowUp');
    const sel = await waitFor('kernel: the selection after ↓↓↑', async () => {
      const n = await page.$eval('tr.sel', (tr) => Number(tr.dataset.n));
      const h = await page.textContent('[data-testid=detail] h2');
      return n === 3 && h.startsWith('Row 3') && n;
    });
    expect('kernel: keyboard ↓↓↑ from row 2 selects row 3 (and shows it)', sel === 3, 3, sel);
    const aria = await page.$eval('tr.sel', (tr) => tr.getAttribute('aria-selected'));
    expect('kernel: aria-selected on the selected row', aria === 'true', 'true', aria);

    // The diagram.
    const sessions = await api(base, 'api/sessions');
    expect('kernel: one session', sessions.length === 1, 1, sessions.length);
    await checkDiagram(page, base, sessions[0].session, 'kernel');
    await shot(page, '06-kernel-diagram');
    await page.click('[data-testid=tab-flows]');

    // /metrics parses with prometheus_client. Messages go on while we look (pings), so
    // the stats are read first and the metric after them.
    const stats = await api(base, 'api/stats');
    const metrics = await http(new URL('metrics', base).href);
    expect('kernel: /metrics answers', metrics.status === 200, 200, metrics.status);
    const parsed = promParse(metrics.body);
    const mt = parsed.sums.contract_proxy_messages_total;
    expect(
      'kernel: /metrics parses with prometheus_client and has contract_proxy_messages_total samples',
      parsed.counts.contract_proxy_messages_total > 0,
      'contract_proxy_messages_total samples',
      Object.keys(parsed.counts).filter((k) => k.startsWith('contract_proxy_messages')),
    );
    expect('kernel: contract_proxy_messages_total sums to the messages', mt >= stats.messages, `>= ${stats.messages}`, mt);
    const want = {
      contract_proxy_messages: 'counter',
      contract_proxy_frame_size_bytes: 'histogram',
      contract_proxy_response_latency_seconds: 'histogram',
      contract_proxy_refused: 'counter',
      contract_proxy_held: 'counter',
      contract_proxy_sent: 'counter',
      contract_proxy_connections: 'counter',
      contract_proxy_discarded_bytes: 'counter',
      contract_proxy_web_rows_evicted: 'counter',
    };
    const om = parsed.openmetrics;
    const missing = Object.entries(want).filter(([k, t]) => !om[k] || om[k][0] !== t);
    // contract_proxy_violations has no samples (nor a family) before a violation: the
    // violation section checks it.
    expect(
      'kernel: /metrics has the documented families (OpenMetrics parser)',
      missing.length === 0 && om.contract_proxy_messages[1] > 0,
      Object.entries(want).map(([k, t]) => `${k} ${t}`).join(', '),
      missing.length ? { missing, got: om } : Object.keys(want).length,
    );

    pageClean(page, origin, 'kernel');
    await ctx.close();

    await stop(core);
    const px = await stop(proxy);
    expect('kernel: the proxy stops on SIGTERM', px.code === 0 || px.signal === 'SIGTERM', 'exit 0', px);
    const size = fs.existsSync(rec) ? fs.statSync(rec).size : 0;
    expect('kernel: a recording was written', size > 0, `${rec}, not empty`, `${size} bytes`);
    state.recording = rec;
    state.recordedRows = all;
  } finally {
    await stop(core);
    await stop(proxy);
    await stop(shell);
  }
}

/**
 * prometheus_client's parsers on a /metrics text: the Prometheus text parser (sample sums and
 * counts per sample name) and the OpenMetrics one (family types), which the endpoint's
 * content type (application/openmetrics-text) names.
 */
function promParse(text) {
  const file = path.join(TMP, 'metrics.txt');
  fs.writeFileSync(file, text);
  const code = `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
text = open(sys.argv[1]).read()
sums, counts = {}, {}
for f in text_string_to_metric_families(text):
    for s in f.samples:
        sums[s.name] = sums.get(s.name, 0) + s.value
        counts[s.name] = counts.get(s.name, 0) + 1
types = {f.name: [f.type, len(f.samples)] for f in om(text)}
print(json.dumps({"sums": sums, "counts": counts, "openmetrics": types}))
`;
  return JSON.parse(execFileSync(promPython(), ['-c', code, file], { encoding: 'utf8' }));
}

let promPy;
/** A Python with prometheus_client: the peers' venv, else target/web-test/venv (made once). */
function promPython() {
  if (promPy) return promPy;
  const has = (py) => {
    try {
      execFileSync(py, ['-c', 'import prometheus_client'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  if (fs.existsSync(PEERS_PY) && has(PEERS_PY)) return (promPy = PEERS_PY);
  const venv = path.join(OUT, 'venv');
  const py = path.join(venv, 'bin/python');
  if (!fs.existsSync(py)) execFileSync('python3', ['-m', 'venv', venv], { stdio: 'inherit' });
  if (!has(py)) execFileSync(py, ['-m', 'pip', 'install', '--quiet', PROM_CLIENT], { stdio: 'inherit' });
  return (promPy = py);
}

async function violation() {
  const dir = fs.mkdtempSync(path.join(TMP, 'v-'));
  fs.writeFileSync(`${dir}/proxy.toml`, kernelToml(dir));
  // The shell drops trace_id from its third request; the core answers settings.describe
  // one byte over the cap (a 1 MiB frame: its bytes are truncated in the detail).
  const shell = await kernelShell('violation-shell', dir, ['--break', 'trace-id']);
  // Traces exported (to a port nobody listens on): the detail then links each trace.
  const otlp = `http://127.0.0.1:${await freePort()}`;
  const proxy = webProxy('violation-proxy', ['--config', `${dir}/proxy.toml`, '--otlp', otlp]);
  let core;
  try {
    const base = await webUrl(proxy);
    const origin = new URL(base).origin;
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await openPage(ctx, base);
    await page.waitForSelector('[data-testid=contract]');
    core = run('violation-core', KERNEL, [
      'core',
      '--control',
      `unix:${dir}/pc.sock`,
      '--data',
      `unix:${dir}/pd.sock`,
      '--break',
      'oversize',
    ]);
    const vs = await waitFor(
      'violation: two violations flagged (missing trace_id, oversize)',
      async () => {
        const r = await api(base, 'api/rows?limit=10&filter=verdict%3Dviolation');
        return r.total >= 2 && r.rows;
      },
      30000,
    );
    expect('violation: flagged by the proxy', true, '', vs.map((r) => `${r.n}:${r.verdict.class}`).join(', '));
    await waitFor('violation: counter-violations = /api/stats violations', async () => {
      const s = await api(base, 'api/stats');
      return (await counter(page, 'violations')) === s.violations && s.violations >= 2;
    });
    expect('violation: the counter', true, '', await counter(page, 'violations'));

    const m = promParse((await http(new URL('metrics', base).href)).body);
    const vstats = (await api(base, 'api/stats')).violations;
    expect(
      'violation: /metrics contract_proxy_violations_total counts them',
      m.openmetrics.contract_proxy_violations?.[0] === 'counter' && m.sums.contract_proxy_violations_total === vstats,
      `a counter summing to ${vstats}`,
      { family: m.openmetrics.contract_proxy_violations, sum: m.sums.contract_proxy_violations_total },
    );

    // A traced row's detail links its trace.
    const traced = (await api(base, 'api/rows?limit=1000')).rows.find((r) => r.trace);
    if (traced) {
      const dt = await api(base, `api/rows/${traced.n}`);
      await page.uncheck('[data-testid=follow]');
      await page.click(`[data-testid=row][data-n="${traced.n}"]`);
      const link = await page.waitForSelector('[data-testid=trace-link]');
      const href = await link.getAttribute('href');
      const target = await link.getAttribute('target');
      expect(
        'violation: the trace link (run with --otlp)',
        !!dt.trace_url && href === dt.trace_url && target === '_blank',
        `a link to ${dt.trace_url} opening a new tab`,
        `${href} (target ${target})`,
      );
      const otelId = /^[0-9a-f]{32}$/i.test(traced.trace)
        ? traced.trace.toLowerCase()
        : createHash('sha256').update(traced.trace).digest('hex').slice(0, 32);
      expect(
        'violation: the trace link names the OTel trace id the spans were exported under',
        dt.trace_url.includes(otelId),
        otelId,
        dt.trace_url,
      );
      await page.check('[data-testid=follow]');
    } else {
      expect('violation: a traced row to check the trace link on', false, 'a row with a trace id', 'none');
    }

    await query(page, 'verdict=violation');
    const n = await sameTotal(page, base, 'filter=verdict%3Dviolation', 'violation: filter verdict=violation');
    await waitFor('violation: the violation rows render', async () => (await renderedRows(page)).length === n);
    const rows = await renderedRows(page);
    const red = rows.every((r) => {
      const [rr, g, b] = r.color.match(/\d+/g).map(Number);
      return r.verdict === 'violation' && rr > 150 && g < 110 && b < 110;
    });
    expect('violation: every row a violation, its verdict in red', red, 'verdict=violation, red text', rows.map((r) => [r.cells[VERDICT], r.color]));
    const classes = rows.map((r) => r.cells[VERDICT]);
    expect(
      'violation: the verdict cell is the class',
      vs.every((v) => classes.includes(v.verdict.class)),
      vs.map((v) => v.verdict.class),
      classes,
    );

    // The missing trace_id: its contract entry and bytes.
    const inv = vs.find((v) => v.verdict.class === 'invalid') || vs[0];
    const d = await api(base, `api/rows/${inv.n}`);
    await page.click(`[data-testid=row][data-n="${inv.n}"]`);
    await page.waitForSelector('[data-testid=violation-entry]');
    const entry = (await page.textContent('[data-testid=violation-entry]')).trim();
    expect(
      'violation: the detail shows the contract entry',
      !!d.violation && !!d.violation.entry && entry === d.violation.entry,
      d.violation && d.violation.entry,
      entry,
    );
    const contract = await page.textContent('[data-testid=violation-contract]');
    expect(
      'violation: the contract JSON at the entry',
      contract === JSON.stringify(d.violation.contract, null, 2),
      JSON.stringify(d.violation.contract),
      contract,
    );
    const facts = await page.textContent('[data-testid=violation]');
    expect(
      'violation: class, code and seed section shown',
      [d.violation.class, String(d.violation.code), String(d.violation.seed)].every((s) => facts.includes(s)),
      `${d.violation.class}, ${d.violation.code}, ${d.violation.seed}`,
      facts.slice(0, 300),
    );
    const hex = await page.textContent('[data-testid=raw-hex]');
    expect(
      'violation: the hex bytes',
      hex.split('\n').length === Math.ceil(d.raw.hex.length / 32) && hex.includes(d.raw.hex.slice(0, 2)),
      `${Math.ceil(d.raw.hex.length / 32)} hex lines`,
      hex.split('\n').length,
    );
    await shot(page, '07-violation-detail');

    // The oversize frame: truncated bytes are said so.
    const big = vs.find((v) => v.verdict.class === 'oversize');
    if (big) {
      const db = await api(base, `api/rows/${big.n}`);
      await page.click(`[data-testid=row][data-n="${big.n}"]`);
      await waitFor('violation: the oversize row\'s detail', async () =>
        (await page.textContent('[data-testid=detail] h2')).startsWith(`Row ${big.n}`),
      );
      const head = db.raw.hex.slice(0, 8);
      expect('violation: the oversize bytes are marked as framed (as travelled)', db.raw.framed === true, 'framed: true', `framed: ${db.raw.framed}, starting ${head}`);
      if (db.raw.truncated) {
        const note = await page.textContent('[data-testid=raw-truncated]');
        expect('violation: truncated bytes are noted', /truncated/i.test(note), 'a truncation note', note);
      }
      await shot(page, '08-violation-truncated');
    } else {
      expect('violation: the oversize frame is flagged', false, 'an oversize row', 'none');
    }
    pageClean(page, origin, 'violation');
    await ctx.close();
  } finally {
    await stop(core);
    await stop(proxy);
    await stop(shell);
  }
}

async function toolchannel() {
  const dir = fs.mkdtempSync(path.join(TMP, 't-'));
  const py = fs.existsSync(PEERS_PY);
  expect('toolchannel: Python for the worker', py, `${PEERS_PY} (scripts/peers-venv.sh makes it)`, py ? PEERS_PY : 'missing');
  const sdk = path.join(OUT, 'sdk-toolchannel');
  execFileSync(CONTRACTGEN, ['generate', '--lang', 'python', '--out', sdk, 'schema/contracts/toolchannel.json'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  // The runtime package the SDK imports, beside it.
  execFileSync(CONTRACTGEN, ['runtime', '--lang', 'python', '--out', `${sdk}-runtime`], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const token = `tok-${process.pid}`;
  const sid = 'ars_web_0001';
  const host = run('toolchannel-host', TC_HOST, [
    '--token',
    token,
    '--session-id',
    sid,
    '--port-file',
    `${dir}/port`,
    '--heartbeat-interval-seconds',
    '1',
    '--heartbeats',
    '2',
    '--tool',
    'echo',
    '--arguments',
    '{"text":"hi"}',
  ]);
  let proxy;
  let worker;
  try {
    const hport = await waitFor('toolchannel: the host to write its port', () => {
      alive(host);
      const t = fs.existsSync(`${dir}/port`) && fs.readFileSync(`${dir}/port`, 'utf8').trim();
      return t || false;
    });
    const pport = await freePort();
    proxy = webProxy('toolchannel-proxy', [
      '--contract',
      'schema/contracts/toolchannel.json',
      '--listen',
      `ws://127.0.0.1:${pport}/worker`,
      '--upstream',
      `ws://127.0.0.1:${hport}/worker`,
    ]);
    const base = await webUrl(proxy);
    const origin = new URL(base).origin;
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await openPage(ctx, base);
    await waitFor('toolchannel: the header names the contract', async () =>
      (await page.textContent('[data-testid=contract]')).startsWith('toolchannel'),
    );
    fs.mkdirSync(`${dir}/ws`);
    worker = run(
      'toolchannel-worker',
      PEERS_PY,
      [
        'examples/toolchannel/worker.py',
        '--url',
        `ws://127.0.0.1:${pport}/worker`,
        '--token',
        token,
        '--session-id',
        sid,
        '--workspace',
        `${dir}/ws`,
      ],
      { env: { PYTHONPATH: `${sdk}${path.delimiter}${sdk}-runtime` } },
    );
    const seen = [];
    const w = await waitFor(
      'toolchannel: the worker to finish',
      async () => {
        seen.push(await total(page));
        return worker.exited;
      },
      60000,
      50,
    );
    expect('toolchannel: the worker exits 0', w.code === 0, 0, w.code === 0 ? w : `${show(w)} ${worker.err.slice(-800)}`);
    const h = await waitFor('toolchannel: the host to finish', () => host.exited, 20000);
    expect('toolchannel: the host exits 0', h.code === 0, 0, h.code === 0 ? h : `${show(h)} ${host.err.slice(-800)}`);
    const all = await sameTotal(page, base, '', 'toolchannel: all rows');
    const distinct = [...new Set([...seen, all])];
    expect('toolchannel: rows appear while the page is open', distinct.length >= 2 && distinct[0] === 0, '0 then more', distinct.join(' → '));
    const vio = (await api(base, 'api/stats')).violations;
    expect('toolchannel: no violations', vio === 0, 0, vio);
    await shot(page, '09-toolchannel-flows');

    // A request's detail links to its answer.
    await query(page, 'kind=request');
    await sameTotal(page, base, 'filter=kind%3Drequest', 'toolchannel: filter kind=request');
    const req = (await api(base, 'api/rows?limit=1&filter=kind%3Drequest')).rows[0];
    const d = await api(base, `api/rows/${req.n}`);
    await page.click(`[data-testid=row][data-n="${req.n}"]`);
    await waitFor('toolchannel: the request\'s detail', async () =>
      (await page.textContent('[data-testid=detail] h2')).startsWith(`Row ${req.n}`),
    );
    expect('toolchannel: /api/rows/N has the pair of a request', d.pair !== null, 'a row number', d.pair);
    await page.click('[data-testid=pair-link]');
    await waitFor('toolchannel: the pair link shows the answer', async () =>
      (await page.textContent('[data-testid=detail] h2')).startsWith(`Row ${d.pair}`),
    );
    expect('toolchannel: pair link', true, '', `row ${req.n} → ${d.pair}`);
    const note = await page.textContent('[data-testid=detail-note]');
    expect('toolchannel: the answer is outside the kind=request view, and the pane says so', /not among/.test(note), 'a note', note);
    await shot(page, '10-toolchannel-pair');
    await page.click('[data-testid=clear]');

    const sessions = await api(base, 'api/sessions');
    expect('toolchannel: a session', sessions.length >= 1, '>= 1', sessions.length);
    await checkDiagram(page, base, sessions[0].session, 'toolchannel');
    await shot(page, '11-toolchannel-diagram');
    pageClean(page, origin, 'toolchannel');
    await ctx.close();
  } finally {
    await stop(worker);
    await stop(proxy);
    await stop(host);
  }
}

/** This machine's first non-loopback IPv4 address. */
function hostIp() {
  try {
    const ips = execFileSync('hostname', ['-I'], { encoding: 'utf8' }).trim().split(/\s+/);
    const v4 = ips.find((ip) => /^\d+\.\d+\.\d+\.\d+$/.test(ip) && !ip.startsWith('127.'));
    if (v4) return v4;
  } catch {
    // no hostname -I: ask the interfaces
  }
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs || []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return null;
}

async function token() {
  expect('token: the kernel run left a recording', !!state.recording, 'the kernel section to pass first', state.recording || 'none');
  const viewer = run('token-show', PROXY, ['show', state.recording, '--web', '0.0.0.0:0']);
  try {
    const printed = await webUrl(viewer);
    const u = new URL(printed);
    const tok = u.searchParams.get('token');
    expect('token: the printed URL has ?token=', !!tok && /^[0-9a-f]{16,}$/.test(tok), 'http://HOST:PORT/?token=HEX', printed);
    const ip = hostIp();
    expect('token: a non-loopback address of this machine', !!ip, 'an IPv4 address (hostname -I)', ip);
    const base = `http://${ip}:${u.port}/`;
    const origin = new URL(base).origin;

    const none = await http(`${base}api/info`);
    expect(`token: GET ${base}api/info without the token is 401`, none.status === 401, 401, `${none.status} ${none.body.trim()}`);
    for (const p of ['', 'assets/app.js', 'api/rows', 'metrics']) {
      const r = await http(`${base}${p}`);
      expect(`token: GET /${p} without the token is 401`, r.status === 401, 401, r.status);
    }
    const bad = await http(`${base}api/info?token=${'0'.repeat(tok.length)}`);
    expect('token: a wrong token is 401', bad.status === 401, 401, bad.status);
    const withTok = await http(`${base}api/info?token=${tok}`);
    expect('token: with the token 200', withTok.status === 200, 200, withTok.status);
    const info = JSON.parse(withTok.body);
    expect('token: source recording', info.source === 'recording', 'recording', info.source);
    const cookie = withTok.headers.get('set-cookie') || '';
    expect(
      'token: the token sets an HttpOnly SameSite=Strict cookie',
      /HttpOnly/i.test(cookie) && /SameSite=Strict/i.test(cookie) && cookie.includes(tok),
      'Set-Cookie: NAME=TOKEN; HttpOnly; SameSite=Strict',
      cookie,
    );
    const pair = cookie.split(';')[0];
    const byCookie = await http(`${base}api/stats`, { headers: { cookie: pair } });
    expect('token: the cookie alone is enough', byCookie.status === 200, 200, byCookie.status);

    // The page with the token URL.
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await openPage(ctx, `${base}?token=${tok}`);
    expect('token: the page with the token loads', page.status === 200, 200, page.status);
    const want = JSON.parse((await http(`${base}api/rows?limit=0`, { headers: { cookie: pair } })).body).total;
    await waitFor('token: the recording\'s rows in the page', async () => (await total(page)) === want && want > 0);
    expect('token: the recording\'s rows in the page', true, '', want);
    if (state.recordedRows !== undefined) {
      expect('token: the recording has the live run\'s rows', want >= state.recordedRows, `>= ${state.recordedRows}`, want);
    }
    const src = await page.textContent('[data-testid=source]');
    expect('token: the page says recording', src === 'recording', 'recording', src);
    const cookies = await ctx.cookies(origin);
    const c = cookies.find((x) => x.value === tok);
    expect(
      'token: the browser holds the cookie (HttpOnly, Strict)',
      !!c && c.httpOnly && c.sameSite === 'Strict',
      'httpOnly, sameSite Strict',
      cookies.map((x) => ({ name: x.name, httpOnly: x.httpOnly, sameSite: x.sameSite })),
    );
    const rendered = (await renderedRows(page)).length;
    expect('token: rows render (the API calls carry the cookie)', rendered > 0, '> 0', rendered);
    await shot(page, '12-recording-token');
    // Reload without the token: the cookie is enough.
    await page.goto(base);
    await waitFor('token: the page without ?token (cookie only)', async () => (await total(page)) === want);
    expect('token: reload without ?token works with the cookie', true, '', want);
    pageClean(page, origin, 'token');
    await ctx.close();

    // A browser without the token is turned away.
    const ctx2 = await browser.newContext();
    const p2 = await ctx2.newPage();
    const r2 = await p2.goto(base);
    expect('token: a browser without the token gets 401', r2.status() === 401, 401, r2.status());
    await shot(p2, '13-no-token');
    await ctx2.close();
  } finally {
    await stop(viewer);
  }
}

/** `demo --web`: the script waits for the page, plays into it live, and the view stays up
 * after the summary until Ctrl-C. */
async function demo() {
  const dir = fs.mkdtempSync(path.join(TMP, 'd-'));
  const proc = run('demo', PROXY, [
    'demo',
    '--log',
    'json',
    '--web',
    '127.0.0.1:0',
    '--dir',
    `${dir}/sock`,
    '--record',
    `${dir}/demo.cprec`,
  ]);
  try {
    const base = await webUrl(proc);
    const origin = new URL(base).origin;
    await new Promise((r) => setTimeout(r, 500));
    const early = proc.out.split('\n').filter((l) => l.includes('"verdict"')).length;
    expect('demo: no frame passes before the page is open', early === 0, 0, early);
    const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    // Every live tick the page receives, in order, as the page's own EventSource saw it.
    await ctx.addInitScript(() => {
      window.__ticks = [];
      const Real = window.EventSource;
      window.EventSource = class extends Real {
        constructor(...a) {
          super(...a);
          this.addEventListener('tick', (e) => window.__ticks.push(JSON.parse(e.data).messages));
        }
      };
    });
    const page = await openPage(ctx, base);
    let navigations = 0;
    page.on('framenavigated', (f) => f === page.mainFrame() && navigations++);
    const line = await waitFor(
      'demo: the summary',
      async () => {
        alive(proc);
        // Only whole lines: a pipe read can end inside the summary, before its newline.
        return proc.out.split('\n').slice(0, -1).find((l) => l.startsWith('{"summary"'));
      },
      60000,
      50,
    );
    const summary = JSON.parse(line).summary;
    await waitFor('demo: every frame of the run in the page', async () => (await total(page)) === summary.frames);
    // The page's first fetch of rows may already hold every frame when the script ran within
    // one tick interval; the tick announcing them follows at most an interval later.
    const ticks = await waitFor(
      'demo: the tick announcing every frame',
      async () => {
        const t = await page.evaluate(() => window.__ticks);
        return t.length > 0 && t[t.length - 1] === summary.frames ? t : null;
      },
    ).catch(() => page.evaluate(() => window.__ticks));
    // The server's first tick is the state before the page counted as a watcher, and the
    // script starts only after that: the page opened on an empty session and every frame
    // came through its live stream, with no reload.
    expect(
      'demo: the rows arrived in the open page, without a reload',
      ticks.length > 1 && ticks[0] === 0 && ticks[ticks.length - 1] === summary.frames && navigations === 0,
      `ticks from 0 to ${summary.frames}, no navigation after the page opened`,
      `ticks ${ticks.join(' ')}; navigations ${navigations}`,
    );
    await shot(page, '14-demo');
    pageClean(page, origin, 'demo');
    await ctx.close();
    proc.child.kill('SIGINT');
    const ended = await Promise.race([proc.exit, new Promise((r) => setTimeout(() => r(null), 15000))]);
    expect('demo: Ctrl-C ends the view, the demo\'s exit code 0', ended && ended.code === 0, 'exit 0', ended);
  } finally {
    await stop(proc);
  }
}

// ---------------------------------------------------------------- main

async function main() {
  console.log(`web view browser test: BIN=${BIN}`);
  await section('preflight', preflight);
  if (failures) return;
  await section('kernel session, live', kernel);
  await section('violation', violation);
  await section('toolchannel session', toolchannel);
  await section('recording behind a token', token);
  await section('demo --web', demo);
}

try {
  await main();
} catch (e) {
  failures++;
  console.log(`FAIL ${e && e.stack ? e.stack : e}`);
} finally {
  if (browser) await browser.close().catch(() => {});
  killAll();
  fs.rmSync(TMP, { recursive: true, force: true });
}
console.log(`\nweb view browser test: ${passes} checks passed, ${failures} sections failed`);
console.log(`screenshots: ${path.relative(ROOT, SHOTS)}/, logs: ${path.relative(ROOT, LOGS)}/`);
process.exit(failures ? 1 : 0);
