//! Wire-layer benchmark: what does contract checking cost over a plain JSON parse?
//!
//! For every framing the contracts use — length-prefixed with strict JSON
//! (rukh `ipc`), length-prefixed with lenient JSON (kernel `control`), NDJSON
//! (xsession `inbox`) and WebSocket text messages (toolchannel `ws`) — a real,
//! valid message is built at two sizes, ~64 bytes (the smallest valid message,
//! which for some envelopes is larger; the table prints the real size) and
//! 4 KiB, by padding a free-text field of its params with ASCII prose:
//!
//! | framing | message | padded field |
//! |---|---|---|
//! | rukh/ipc | `rukh.log` notification | `params.message` |
//! | kernel/control | `command.handle` request | `payload.text` |
//! | xsession/inbox | `user` frame | `message.content` |
//! | toolchannel/ws | `tools/call` request | `params.arguments.command` |
//!
//! Each message is encoded with its channel's codec, and the same bytes are measured two ways:
//!
//! - `full`: the codec decodes the framed bytes, then [`Wire::decode`] parses them under the
//!   channel's JSON rules (strict or lenient, bounded), classifies the message and validates
//!   envelope and params against the contract's schemas;
//! - `baseline`: `serde_json::from_slice::<serde_json::Value>` of the same JSON payload.
//!
//! Both run through `iter_batched`, so filling the read buffer (setup) and dropping the
//! decoded values happen outside the timed section, alike for both.
//!
//! After criterion's groups (`<group>/{full,baseline}/<size>`), a ratio table is printed to
//! stdout, one line per framing × size, with a verdict against the target "full ≤ 2.0× plain
//! parse". The verdict's ratio is measured right after criterion, in rounds that each time one
//! 64-call batch of full and one of baseline back to back, so both see the same machine load;
//! it is the median over rounds of full / baseline, which a preemption landing in a few batches
//! does not move. On a shared 2-core machine criterion's separate runs of the two can drift
//! apart by ±30%, so each line also prints, for reference, the ratio of the paired mean times
//! and criterion's own means (read from
//! `<criterion home>/<group>/<function>/<size>/new/estimates.json` when this run wrote them).
//! Under `cargo test --benches` (criterion's test mode) each case runs once and no table is
//! printed.
//!
//! Diagnostics:
//! - `WIRE_BENCH_BREAKDOWN=1` adds a per-stage table (codec, bounded parse, classify, envelope
//!   and params validation, in ns) after the ratio table;
//! - `WIRE_BENCH_PROFILE=<label>:<size>[@plain]` (e.g. `kernel/control:64B`) runs only that
//!   case's full path (or baseline) 20 000 times and exits, for `perf` or
//!   `valgrind --tool=callgrind --toggle-collect=wire::full`.
//!
//! Run: `cargo bench -p contract --bench wire`.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use contract::wire::{ChannelCodec, Message, Wire};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use serde_json::{Value, json};

/// The target: full path at most this many times the plain parse.
const TARGET: f64 = 2.0;

/// Criterion settings: the bench machine has 2 cores, keep the run short.
const SAMPLE_SIZE: usize = 30;
const MEASUREMENT: Duration = Duration::from_secs(2);
const WARM_UP: Duration = Duration::from_millis(500);

/// One framing × size: the encoded bytes and everything needed to decode them.
struct Case {
    /// `contract/channel`, for the table.
    label: &'static str,
    /// Criterion group name (filesystem-safe).
    group: &'static str,
    /// Size label and criterion parameter (`64B`, `4KiB`).
    size: &'static str,
    channel: &'static str,
    from: &'static str,
    wire: Arc<Wire>,
    codec: ChannelCodec,
    /// The bytes on the wire (prefix or newline included).
    framed: Vec<u8>,
    /// The JSON payload alone.
    payload: Vec<u8>,
}

/// A builder of a valid message around a free-text filler string.
type Build = fn(&str) -> Value;

fn rukh_log(fill: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "rukh.log", "params": {"level": "info", "message": fill}})
}

fn kernel_command(fill: &str) -> Value {
    json!({
        "v": 1, "type": "request", "id": "s-0042", "method": "command.handle",
        "timestamp": 1756750000.123, "trace_id": "t-8f21",
        "payload": {"text": fill, "source": "typed"}
    })
}

fn xsession_user(fill: &str) -> Value {
    json!({
        "msgV": 1, "msgId": "m-1", "type": "user",
        "message": {"role": "user", "content": fill}
    })
}

fn toolchannel_call(fill: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "exec", "arguments": {"command": fill}}
    })
}

/// `n` bytes of plain ASCII prose (no escapes, so the serialized length is exact).
fn filler(n: usize) -> String {
    const TEXT: &str = "the quick brown fox jumps over the lazy dog while the build runs; ";
    TEXT.bytes().cycle().take(n).map(char::from).collect()
}

/// The message padded to `target` bytes of JSON, or its smallest form if that is already larger.
fn sized(build: Build, target: usize) -> Vec<u8> {
    const MIN_FILL: usize = 8;
    let base = serde_json::to_vec(&build("")).expect("serialize").len();
    let fill = target.saturating_sub(base).max(MIN_FILL);
    serde_json::to_vec(&build(&filler(fill))).expect("serialize")
}

fn frame(codec: &mut ChannelCodec, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    match codec {
        ChannelCodec::Message(c) => {
            c.check(payload).expect("within cap");
            out.extend_from_slice(payload);
        }
        c => c.encode_json(payload, &mut out).expect("encode"),
    }
    out.to_vec()
}

/// The measured full path: codec decode of one buffered frame, then parse, classify, validate.
/// Returns everything it built so the caller drops it outside the timed section.
/// (Never inlined, so profilers can single it out.)
#[inline(never)]
fn full(case: &Case, codec: &mut ChannelCodec, mut buf: BytesMut) -> (BytesMut, Bytes, Message) {
    let frame = match codec {
        ChannelCodec::Message(c) => {
            c.check(&buf).expect("within cap");
            buf.split().freeze()
        }
        c => c
            .decode_json(&mut buf, false)
            .expect("decode")
            .expect("whole frame"),
    };
    let msg = case
        .wire
        .decode(case.channel, case.from, &frame, None)
        .unwrap_or_else(|v| panic!("{} {}: {v:?}", case.label, case.size));
    (buf, frame, msg)
}

/// The plain parse the full path is compared with. (Never inlined, like [`full`].)
#[inline(never)]
fn baseline(payload: &[u8]) -> Value {
    serde_json::from_slice::<Value>(payload).expect("plain parse")
}

fn cases() -> Vec<Case> {
    let specs: [(&str, &str, &str, &str, &str, Build); 4] = [
        ("rukh/ipc", "rukh-ipc", "rukh", "ipc", "extension", rukh_log),
        (
            "kernel/control",
            "kernel-control",
            "kernel",
            "control",
            "shell",
            kernel_command,
        ),
        (
            "xsession/inbox",
            "xsession-inbox",
            "xsession",
            "inbox",
            "sender",
            xsession_user,
        ),
        (
            "toolchannel/ws",
            "toolchannel-ws",
            "toolchannel",
            "ws",
            "host",
            toolchannel_call,
        ),
    ];
    let mut out = Vec::new();
    for (label, group, name, channel, from, build) in specs {
        let c = contract::builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let wire = Arc::new(Wire::new(Arc::new(c)).unwrap_or_else(|e| panic!("{name}: {e}")));
        for (size, target) in [("64B", 64), ("4KiB", 4096)] {
            let payload = sized(build, target);
            let mut codec = wire.codec(channel).expect("codec");
            let framed = frame(&mut codec, &payload);
            let case = Case {
                label,
                group,
                size,
                channel,
                from,
                wire: wire.clone(),
                codec,
                framed,
                payload,
            };
            // The message must be one the contract accepts, and both paths must agree on it.
            let mut codec = case.codec.clone();
            let (_, frame, msg) = full(&case, &mut codec, BytesMut::from(&case.framed[..]));
            assert_eq!(
                &frame[..],
                &case.payload[..],
                "{label} {size}: codec round trip"
            );
            assert_eq!(
                msg.value,
                baseline(&case.payload),
                "{label} {size}: same value"
            );
            assert!(msg.method.is_some(), "{label} {size}: classified");
            out.push(case);
        }
    }
    out
}

fn bench(c: &mut Criterion, cases: &[Case]) {
    for group_cases in cases.chunk_by(|a, b| a.group == b.group) {
        let mut g = c.benchmark_group(group_cases[0].group);
        for case in group_cases {
            g.throughput(Throughput::Bytes(case.payload.len() as u64));
            let mut codec = case.codec.clone();
            g.bench_with_input(BenchmarkId::new("full", case.size), case, |b, case| {
                b.iter_batched(
                    || BytesMut::from(&case.framed[..]),
                    |buf| full(case, &mut codec, black_box(buf)),
                    BatchSize::SmallInput,
                )
            });
            g.bench_with_input(BenchmarkId::new("baseline", case.size), case, |b, case| {
                b.iter_batched(
                    || (),
                    |()| baseline(black_box(&case.payload)),
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

/// Where criterion writes its estimates (same order of preference as criterion itself).
fn criterion_homes() -> Vec<PathBuf> {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return vec![h.into()];
    }
    let mut homes = Vec::new();
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        homes.push(PathBuf::from(t).join("criterion"));
    }
    // <target>/release/deps/wire-<hash>, or <target>/<triple>/release/deps/wire-<hash>.
    if let Ok(exe) = std::env::current_exe() {
        for up in [3, 4] {
            if let Some(t) = exe.ancestors().nth(up) {
                homes.push(t.join("criterion"));
            }
        }
    }
    homes
}

/// Criterion's mean (ns per iteration) for one benchmark, if this run wrote it.
fn criterion_mean(group: &str, function: &str, size: &str, since: SystemTime) -> Option<f64> {
    criterion_homes().into_iter().find_map(|home| {
        let path = home
            .join(group)
            .join(function)
            .join(size)
            .join("new")
            .join("estimates.json");
        let fresh = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= since);
        if !fresh {
            return None;
        }
        let v: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
        v.pointer("/mean/point_estimate").and_then(Value::as_f64)
    })
}

/// Calls per timed batch in the paired timings: small, so few batches catch a preemption.
const BATCH: usize = 64;

/// A timed batch of `BATCH` calls of `routine`, setup and drops outside the clock (as
/// criterion's `iter_batched`); yields ns per call.
fn batch<'a, I: 'a, O: 'a>(
    mut setup: impl FnMut() -> I + 'a,
    mut routine: impl FnMut(I) -> O + 'a,
) -> Box<dyn FnMut() -> f64 + 'a> {
    Box::new(move || {
        let inputs: Vec<I> = (0..BATCH).map(|_| setup()).collect();
        let mut outputs = Vec::with_capacity(BATCH);
        let start = Instant::now();
        outputs.extend(inputs.into_iter().map(&mut routine));
        let t = start.elapsed();
        drop(black_box(outputs));
        t.as_nanos() as f64 / BATCH as f64
    })
}

/// ns per call of each routine in each round, timed in interleaved rounds (one batch of each
/// per round) for about `budget`, so that every routine sees the same machine load.
fn interleaved(mut routines: Vec<Box<dyn FnMut() -> f64 + '_>>, budget: Duration) -> Vec<Vec<f64>> {
    for r in routines.iter_mut() {
        r(); // warm-up
    }
    let mut times = vec![Vec::new(); routines.len()];
    let start = Instant::now();
    while times[0].len() < 50 || start.elapsed() < budget {
        for (t, r) in times.iter_mut().zip(routines.iter_mut()) {
            t.push(r());
        }
    }
    times
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Full path and baseline of one case, timed in alternating batches.
struct Paired {
    /// Median ns per call of each.
    full: f64,
    plain: f64,
    /// Median over rounds of (full batch / baseline batch of the same round): the verdict's
    /// ratio, immune to a preemption that lands in a few batches.
    ratio: f64,
    /// Ratio of the mean times, outliers included.
    ratio_of_means: f64,
}

fn paired(case: &Case) -> Paired {
    let mut codec = case.codec.clone();
    let t = interleaved(
        vec![
            batch(
                || BytesMut::from(&case.framed[..]),
                |buf| full(case, &mut codec, black_box(buf)),
            ),
            batch(|| (), |()| baseline(black_box(&case.payload))),
        ],
        Duration::from_millis(600),
    );
    let per_round: Vec<f64> = t[0].iter().zip(&t[1]).map(|(f, p)| f / p).collect();
    Paired {
        full: median(&t[0]),
        plain: median(&t[1]),
        ratio: median(&per_round),
        ratio_of_means: mean(&t[0]) / mean(&t[1]),
    }
}

/// The ratio table: one line per framing × size, with the verdict against [`TARGET`].
fn ratio_table(cases: &[Case], since: SystemTime) {
    println!();
    println!(
        "wire-layer cost: full (codec + strict/bounded parse + classify + validate) / plain serde_json::from_slice::<Value>"
    );
    println!(
        "(ratio = median over rounds of alternating {BATCH}-call batches of both, which share the machine's load; \
         ratio of mean times and criterion's means for reference)"
    );
    let mut misses = 0;
    for case in cases {
        let p = paired(case);
        let ok = p.ratio <= TARGET;
        misses += usize::from(!ok);
        let reference = match criterion_mean(case.group, "full", case.size, since)
            .zip(criterion_mean(case.group, "baseline", case.size, since))
        {
            Some((f, b)) => format!("criterion means {f:.0} / {b:.0} ns = {:.2}x", f / b),
            None => "criterion: not run".to_string(),
        };
        println!(
            "ratio {} {}: {:.2}x (target <= {TARGET:.1}x) {}   [{} B payload; full {:.0} ns, plain {:.0} ns; ratio of means {:.2}x; {reference}]",
            case.label,
            case.size,
            p.ratio,
            if ok { "OK" } else { "MISS" },
            case.payload.len(),
            p.full,
            p.plain,
            p.ratio_of_means,
        );
    }
    println!(
        "verdict: {} of {} cases within {TARGET:.1}x of a plain parse{}",
        cases.len() - misses,
        cases.len(),
        if misses == 0 {
            ""
        } else {
            " — target missed"
        }
    );
}

/// Where the time of the full path goes, stage by stage, against the plain parse
/// (`WIRE_BENCH_BREAKDOWN=1`).
fn breakdown(cases: &[Case]) {
    use contract::model::Binding;
    use contract::wire::JsonLimits;
    use contract::wire::framing::limit_bytes;

    println!();
    println!(
        "where the time goes (median ns per message over alternating batches; classify includes envelope + params validation)"
    );
    println!(
        "{:<16} {:>5} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7}",
        "case", "size", "full", "plain", "codec", "parse", "classify", "envelope", "params"
    );
    for case in cases {
        let c = case.wire.contract().clone();
        let ch = &c.channels[case.channel];
        let j = ch.json.as_ref().expect("JSON channel");
        let lim = |n: &Option<String>, d: usize| {
            n.as_ref()
                .map_or(d, |n| limit_bytes(&c, n).expect("limit") as usize)
        };
        let limits = JsonLimits {
            strict: j.strict,
            object_only: j.object_only,
            max_depth: lim(&j.max_depth, JsonLimits::default().max_depth),
            max_items: lim(&j.max_items, JsonLimits::default().max_items),
            no_null: j.no_null,
        };
        let compile = |s: &Value| {
            jsonschema::draft202012::new(&contract::check::rooted(&c, s)).expect("schema")
        };
        let envelope = ch.message.as_ref().map(compile);
        let value = baseline(&case.payload);
        let method = case
            .wire
            .classify(case.channel, case.from, value.clone(), None)
            .expect("valid")
            .method
            .expect("method");
        let params = c.methods[&method].params.as_ref().map(compile);
        let payload_ptr = match &ch.binding {
            Some(Binding::Envelope { payload, .. }) => payload.clone(),
            Some(Binding::Jsonrpc { .. }) => "/params".into(),
            _ => String::new(),
        };
        let payload = value.pointer(&payload_ptr).expect("payload").clone();

        let mut codec_full = case.codec.clone();
        let mut codec_only = case.codec.clone();
        let t = interleaved(
            vec![
                batch(
                    || BytesMut::from(&case.framed[..]),
                    |buf| full(case, &mut codec_full, black_box(buf)),
                ),
                batch(|| (), |()| baseline(black_box(&case.payload))),
                batch(
                    || BytesMut::from(&case.framed[..]),
                    |mut buf| match &mut codec_only {
                        ChannelCodec::Message(c) => {
                            c.check(&buf).expect("cap");
                            (Some(buf.split().freeze()), buf)
                        }
                        c => (c.decode_json(&mut buf, false).expect("frame"), buf),
                    },
                ),
                batch(
                    || (),
                    |()| {
                        contract::wire::json::parse(black_box(&case.payload), &limits)
                            .expect("parse")
                    },
                ),
                batch(
                    || value.clone(),
                    |v| {
                        case.wire
                            .classify(case.channel, case.from, v, None)
                            .expect("classify")
                    },
                ),
                batch(
                    || (),
                    |()| {
                        envelope
                            .as_ref()
                            .is_none_or(|e| e.is_valid(black_box(&value)))
                    },
                ),
                batch(
                    || (),
                    |()| {
                        params
                            .as_ref()
                            .is_none_or(|p| p.is_valid(black_box(&payload)))
                    },
                ),
            ],
            Duration::from_millis(1000),
        );
        let m: Vec<f64> = t.iter().map(|x| median(x)).collect();
        println!(
            "{:<16} {:>5} {:>7.0} {:>7.0} {:>7.0} {:>7.0} {:>8.0} {:>8.0} {:>7.0}",
            case.label, case.size, m[0], m[1], m[2], m[3], m[4], m[5], m[6]
        );
    }
}

fn main() {
    let since = SystemTime::now();
    let cases = cases();

    // Profiling hook: `WIRE_BENCH_PROFILE=kernel/control:64B <bench binary>` runs only that
    // case's full path (or, with an `@plain` suffix, its baseline) in a loop for perf or
    // callgrind (`--toggle-collect=wire::full` / `wire::baseline`), then exits.
    if let Some(want) = std::env::var_os("WIRE_BENCH_PROFILE") {
        let want = want.to_string_lossy().into_owned();
        let (want, plain) = match want.strip_suffix("@plain") {
            Some(w) => (w.to_string(), true),
            None => (want, false),
        };
        let case = cases
            .iter()
            .find(|c| format!("{}:{}", c.label, c.size) == want)
            .expect("no such case");
        let mut codec = case.codec.clone();
        for _ in 0..20_000 {
            if plain {
                black_box(baseline(black_box(&case.payload)));
            } else {
                black_box(full(case, &mut codec, BytesMut::from(&case.framed[..])));
            }
        }
        return;
    }

    let args: Vec<String> = std::env::args().collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    // Same rule as criterion: without `--bench`, or with `--test`, benchmarks only run once.
    let benchmarking = has("--bench") && !has("--test") && !has("--list");

    let mut c = Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .measurement_time(MEASUREMENT)
        .warm_up_time(WARM_UP)
        .configure_from_args();
    bench(&mut c, &cases);
    c.final_summary();

    if benchmarking {
        ratio_table(&cases, since);
        if std::env::var_os("WIRE_BENCH_BREAKDOWN").is_some() {
            breakdown(&cases);
        }
    }
}
