//! Recording: every frame a route carries, redacted, to a streaming protobuf file.
//!
//! The format is documented in `proxy/recording.proto` and `docs/recording.md`:
//! the magic line `CPREC1\n`, one length-delimited [`Header`], then
//! length-delimited [`Record`]s. The structs here are written by hand to match
//! the `.proto` (prost derive, no protoc at build time).
//!
//! The relay never touches the file. [`Recorder::record`] puts the record on a
//! bounded queue ([`QUEUE`] records) that a dedicated writer thread drains:
//! redaction, JSON work and disk writes all happen there. When the queue is full
//! `record().await` waits for space, so a slow disk slows the relay down rather
//! than losing frames or growing memory; once the writer has failed, `record`
//! returns the error, so nothing is dropped without the caller knowing.
//!
//! [`Reader`] streams records back with the length of each checked against
//! [`MAX_RECORD_LEN`] before anything is allocated; [`show`] prints them through
//! the live view's [`Logger`].

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message as _;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::inspect::{Dir, Event, Inspection, RawForm, Verdict};
use crate::log::Logger;
use crate::redact;

/// First bytes of every recording.
pub const MAGIC: &[u8; 7] = b"CPREC1\n";
/// Format version written to [`Header::format_version`].
pub const FORMAT_VERSION: u32 = 1;
/// Largest header or record a reader accepts; checked before allocating.
pub const MAX_RECORD_LEN: u64 = 64 * 1024 * 1024;
/// Records queued between the relay and the writer thread.
pub const QUEUE: usize = 1024;
/// How long [`Recorder::finish`] waits for the writer to drain and flush.
pub const FINISH_DEADLINE: Duration = Duration::from_secs(30);

/// What a route's header entry carries of `c` (its `contract_json`): the whole document
/// for a contract that is not built in, nothing for one every proxy has by name.
pub fn contract_document(c: &contract::Contract) -> String {
    let builtin = contract::builtin(&c.name).is_ok_and(|b| b == *c);
    if builtin {
        return String::new();
    }
    serde_json::to_string(c).unwrap_or_default()
}

/// The contract a recorded route speaks: `given` (a name or path) when there is one,
/// else the document the route carries (a contract loaded from a file), else the name
/// it records.
pub fn route_contract(
    path: &Path,
    header: &Header,
    route: &RouteInfo,
    given: Option<&str>,
) -> Result<contract::Contract, contract::LoadError> {
    if let Some(c) = given {
        return contract::resolve(c);
    }
    if !route.contract_json.is_empty() {
        let origin = format!("{} (route {})", path.display(), route.name);
        return contract::from_str(&origin, &route.contract_json);
    }
    let name = Some(route.contract.as_str())
        .filter(|c| !c.is_empty())
        .unwrap_or(&header.contract);
    contract::resolve(name)
}

/// First message of a recording (proto `Header`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    /// Format version ([`FORMAT_VERSION`]).
    #[prost(uint32, tag = "1")]
    pub format_version: u32,
    /// Contract name.
    #[prost(string, tag = "2")]
    pub contract: String,
    /// Contract version.
    #[prost(string, tag = "3")]
    pub contract_version: String,
    /// Recording start, nanoseconds since the Unix epoch.
    #[prost(uint64, tag = "4")]
    pub created_unix_nanos: u64,
    /// Version of the proxy that wrote the file.
    #[prost(string, tag = "5")]
    pub proxy_version: String,
    /// Routes of the session.
    #[prost(message, repeated, tag = "6")]
    pub routes: Vec<RouteInfo>,
}

/// One route (proto `Route`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RouteInfo {
    /// Route name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Listen endpoint as bound (the real port where 0 was asked for).
    #[prost(string, tag = "2")]
    pub listen: String,
    /// Upstream endpoint as written.
    #[prost(string, tag = "3")]
    pub upstream: String,
    /// Channel of the contract.
    #[prost(string, tag = "4")]
    pub channel: String,
    /// Party that connects (sends `Up`).
    #[prost(string, tag = "5")]
    pub client: String,
    /// Party behind the upstream (sends `Down`).
    #[prost(string, tag = "6")]
    pub server: String,
    /// The route's contract when it differs from the header's (empty: the header's).
    #[prost(string, tag = "7")]
    pub contract: String,
    /// Its version.
    #[prost(string, tag = "8")]
    pub contract_version: String,
    /// The route's contract document (JSON) when it was loaded from a file rather than
    /// built in, so a replay elsewhere finds it without the file.
    #[prost(string, tag = "9")]
    pub contract_json: String,
}

/// Which way a recorded frame travelled (proto `Direction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Direction {
    /// Not a frame.
    Unspecified = 0,
    /// Client to upstream.
    Up = 1,
    /// Upstream to client.
    Down = 2,
}

impl From<Dir> for Direction {
    fn from(d: Dir) -> Self {
        match d {
            Dir::Up => Direction::Up,
            Dir::Down => Direction::Down,
        }
    }
}

/// One frame or connection note (proto `Record`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Record {
    /// When the proxy saw it, nanoseconds since the Unix epoch.
    #[prost(uint64, tag = "1")]
    pub unix_nanos: u64,
    /// Route name.
    #[prost(string, tag = "2")]
    pub route: String,
    /// Connection id.
    #[prost(uint64, tag = "3")]
    pub conn: u64,
    /// Direction ([`Direction`] as i32).
    #[prost(enumeration = "Direction", tag = "4")]
    pub dir: i32,
    /// Channel of the contract.
    #[prost(string, tag = "5")]
    pub channel: String,
    /// Frame payload, redacted, without length prefix or newline.
    #[prost(bytes = "vec", tag = "6")]
    pub raw: Vec<u8>,
    /// `{"event": …, "message": …}`, redacted; empty for notes.
    #[prost(string, tag = "7")]
    pub decoded_json: String,
    /// Connection note (empty: none).
    #[prost(string, tag = "8")]
    pub note: String,
    /// Binary data frames: the header values after the length, in the framing's order.
    #[prost(uint64, repeated, tag = "9")]
    pub header: Vec<u64>,
    /// What `raw` holds ([`Form`] as i32).
    #[prost(enumeration = "Form", tag = "10")]
    pub form: i32,
}

/// What a frame record's `raw` holds (proto `Form`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Form {
    /// A message's payload; the channel's framing goes around it.
    Payload = 0,
    /// A binary frame's payload; `header` holds its header values.
    Data = 1,
    /// The bytes as they travelled, framing included.
    AsTravelled = 2,
    /// A binary message on a message transport.
    BinaryMessage = 3,
    /// No frame: an event about the connection.
    NoFrame = 4,
}

/// Nanoseconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn unix_nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Header {
    /// A header for `contract` with `routes`, stamped now with this proxy's version.
    pub fn new(contract: &contract::Contract, routes: Vec<RouteInfo>) -> Self {
        Header {
            format_version: FORMAT_VERSION,
            contract: contract.name.clone(),
            contract_version: contract.version.clone(),
            created_unix_nanos: unix_nanos_now(),
            proxy_version: env!("CARGO_PKG_VERSION").to_string(),
            routes,
        }
    }

    /// The route named `name`.
    pub fn route(&self, name: &str) -> Option<&RouteInfo> {
        self.routes.iter().find(|r| r.name == name)
    }
}

impl Record {
    /// A frame the relay forwarded, stamped now. `raw` is the payload without its length
    /// prefix or newline; `event` is what the inspector said about it and `message` the
    /// decoded frame (when absent, the writer decodes `raw` if it is JSON). Redaction
    /// happens on the writer thread, before anything is written.
    pub fn frame(
        route: &str,
        conn: u64,
        dir: Dir,
        channel: &str,
        raw: &[u8],
        event: Option<&Event>,
    ) -> Self {
        Record::build(route, conn, dir, channel, raw, event, None)
    }

    fn build(
        route: &str,
        conn: u64,
        dir: Dir,
        channel: &str,
        raw: &[u8],
        event: Option<&Event>,
        message: Option<&Value>,
    ) -> Self {
        let mut obj = Map::new();
        if let Some(Ok(ev)) = event.map(serde_json::to_value) {
            obj.insert("event".into(), ev);
        }
        if let Some(m) = message {
            obj.insert("message".into(), m.clone());
        }
        let decoded_json = if obj.is_empty() {
            String::new()
        } else {
            Value::Object(obj).to_string()
        };
        Record {
            unix_nanos: unix_nanos_now(),
            route: route.to_string(),
            conn,
            dir: Direction::from(dir) as i32,
            channel: channel.to_string(),
            raw: raw.to_vec(),
            decoded_json,
            ..Default::default()
        }
    }

    /// A frame as the inspector saw it: route, connection, direction and channel come from
    /// the event; the decoded message is kept when it parsed. Stamped now.
    pub fn inspected(raw: &[u8], inspection: &Inspection) -> Self {
        let e = &inspection.event;
        let mut r = Record::build(
            &e.route,
            e.conn,
            e.dir,
            &e.channel,
            raw,
            Some(e),
            inspection.message.as_ref(),
        );
        let form = match &inspection.form {
            RawForm::Payload => Form::Payload,
            RawForm::Data(header) => {
                r.header = header.clone();
                Form::Data
            }
            RawForm::AsTravelled => Form::AsTravelled,
            RawForm::BinaryMessage => Form::BinaryMessage,
            RawForm::NoFrame => Form::NoFrame,
        };
        r.form = form as i32;
        r
    }

    /// A note about connection `conn` (opened, closed, close code, enforcement action), stamped now.
    pub fn note(route: &str, conn: u64, text: impl Into<String>) -> Self {
        Record {
            unix_nanos: unix_nanos_now(),
            route: route.to_string(),
            conn,
            note: text.into(),
            ..Default::default()
        }
    }

    /// The direction, if this record is a frame.
    pub fn direction(&self) -> Option<Dir> {
        match Direction::try_from(self.dir) {
            Ok(Direction::Up) => Some(Dir::Up),
            Ok(Direction::Down) => Some(Dir::Down),
            _ => None,
        }
    }

    /// The decoded JSON object, if any.
    pub fn decoded(&self) -> Option<Map<String, Value>> {
        match serde_json::from_str(&self.decoded_json) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        }
    }

    /// Redact in place (idempotent); returns how many distinct secret values it removed.
    fn seal(&mut self) -> usize {
        let mut secrets = Vec::new();
        if let std::borrow::Cow::Owned(r) = redact::redact_frame_collect(&self.raw, &mut secrets) {
            self.raw = r;
        }
        let message: Option<Value> = if self.raw.is_empty() {
            None
        } else {
            serde_json::from_slice(&self.raw).ok()
        };
        if !self.decoded_json.is_empty() || message.is_some() {
            let mut obj = match serde_json::from_str::<Value>(&self.decoded_json) {
                Ok(Value::Object(m)) => m,
                Ok(other) => Map::from_iter([("event".to_string(), other)]),
                Err(_) if self.decoded_json.is_empty() => Map::new(),
                // Not JSON: kept as text, scrubbed like a frame.
                Err(_) => {
                    let text =
                        redact::redact_frame_collect(self.decoded_json.as_bytes(), &mut secrets);
                    let text = String::from_utf8_lossy(&text).into_owned();
                    Map::from_iter([("text".to_string(), Value::String(text))])
                }
            };
            if let Some(m) = message {
                obj.entry("message").or_insert(m);
            }
            let mut v = Value::Object(obj);
            redact::redact_value_collect(&mut v, &mut secrets);
            // A violation reason may quote the secret it found in the frame.
            redact::scrub_strings(&mut v, &secrets);
            self.decoded_json = v.to_string();
        }
        if !self.note.is_empty() {
            let mut v = Value::String(
                String::from_utf8_lossy(&redact::redact_frame_collect(
                    self.note.as_bytes(),
                    &mut secrets,
                ))
                .into_owned(),
            );
            redact::scrub_strings(&mut v, &secrets);
            if let Value::String(s) = v {
                self.note = s;
            }
        }
        secrets.sort_unstable();
        secrets.dedup();
        secrets.len()
    }
}

/// Errors writing or reading a recording.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The live pcapng capture failed.
    #[error("pcap: {0}")]
    Capture(String),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The recording.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file does not start with `CPREC1\n`.
    #[error("{path}: not a contract-proxy recording (no CPREC1 magic line)")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// The header is of a format version this build cannot read.
    #[error("{path}: recording format version {found}, this build reads {FORMAT_VERSION}")]
    Version {
        /// The file.
        path: PathBuf,
        /// Version found.
        found: u32,
    },
    /// A length prefix is larger than any record may be: the file is corrupt.
    #[error(
        "{path}: corrupt recording at byte {offset}: record length {len} exceeds the {max}-byte cap"
    )]
    TooLong {
        /// The file.
        path: PathBuf,
        /// Byte offset of the length prefix.
        offset: u64,
        /// The length it claims.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// A record does not decode.
    #[error("{path}: corrupt recording at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the record's length prefix.
        offset: u64,
        /// Why.
        reason: String,
    },
    /// The file ends inside a record (a recording cut short by a crash or a full disk).
    #[error(
        "{path}: truncated recording: the record at byte {offset} needs {needed} bytes, the file has {have}; the {records} records before it are intact"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Byte offset of the record's length prefix.
        offset: u64,
        /// Bytes the record needs after its prefix (0 when the prefix itself is cut).
        needed: u64,
        /// Bytes present.
        have: u64,
        /// Records read before it.
        records: u64,
    },
    /// The writer stopped (after an error, or after `finish`); the record was not written.
    #[error("recording stopped: {0}")]
    Stopped(String),
    /// The writer did not finish in time.
    #[error("recording writer did not finish within {0:?}")]
    Timeout(Duration),
}

/// What a finished recording holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Records written (not counting the header).
    pub records: u64,
    /// Bytes in the file, magic and header included.
    pub bytes: u64,
    /// Secret values removed (distinct values per record, summed over records).
    pub redacted: u64,
    /// What the live pcapng capture holds, when there is one.
    pub pcap: Option<crate::pcap::PcapStats>,
}

/// Where a [`Recorder`] writes: the recording, a live pcapng capture (`run --pcap`), or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    /// The recording file; it must not exist.
    pub recording: Option<PathBuf>,
    /// The pcapng file, written as records arrive (replaced if it exists).
    pub pcap: Option<PathBuf>,
}

enum Cmd {
    Rec(Record),
    Finish,
}

/// A cheap, cloneable handle that queues records for a [`Recorder`]'s writer.
#[derive(Clone)]
pub struct RecordSink {
    tx: mpsc::Sender<Cmd>,
    failed: Arc<Mutex<Option<String>>>,
}

impl RecordSink {
    /// Queue one record. Waits while the queue is full (backpressure); an error means
    /// the writer has stopped and the record was not written.
    pub async fn record(&self, rec: Record) -> Result<(), RecordError> {
        self.tx
            .send(Cmd::Rec(rec))
            .await
            .map_err(|_| RecordError::Stopped(self.why_stopped()))
    }

    fn why_stopped(&self) -> String {
        self.failed
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .unwrap_or_else(|| "the recording was finished".into())
    }
}

/// Writes a recording from a dedicated thread.
pub struct Recorder {
    sink: RecordSink,
    done: oneshot::Receiver<Result<RecordStats, RecordError>>,
    thread: std::thread::JoinHandle<()>,
}

impl Recorder {
    /// Create `path` (never overwriting an existing file; mode 0600 on unix) and write the
    /// magic line and `header`, then start the writer thread.
    pub fn create(path: &Path, header: Header) -> Result<Self, RecordError> {
        Recorder::start(
            &Outputs {
                recording: Some(path.to_path_buf()),
                pcap: None,
            },
            header,
        )
    }

    /// Open every output of `outputs` (the recording as [`Recorder::create`] does), then
    /// start the writer thread.
    pub fn start(outputs: &Outputs, header: Header) -> Result<Self, RecordError> {
        let mut stats = RecordStats::default();
        let out = match &outputs.recording {
            Some(path) => {
                let (out, bytes) = open_recording(path, &header)?;
                stats.bytes = bytes;
                Some(out)
            }
            None => None,
        };
        let pcap = match &outputs.pcap {
            Some(path) => Some(open_capture(path, &header)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let (done_tx, done) = oneshot::channel();
        let failed = Arc::new(Mutex::new(None));
        let slot = failed.clone();
        let p = outputs
            .recording
            .clone()
            .or_else(|| outputs.pcap.clone())
            .unwrap_or_default();
        let thread = std::thread::Builder::new()
            .name("contract-proxy-recorder".into())
            .spawn(move || {
                let r = write_loop(Writers { out, pcap }, rx, stats, &p);
                if let (Err(e), Ok(mut f)) = (&r, slot.lock()) {
                    *f = Some(e.to_string());
                }
                let _ = done_tx.send(r);
            })
            .map_err(|source| RecordError::Io {
                path: PathBuf::from("recorder thread"),
                source,
            })?;
        Ok(Recorder {
            sink: RecordSink { tx, failed },
            done,
            thread,
        })
    }

    /// A handle for a connection task; records from all handles go to the same file in the
    /// order they are queued.
    pub fn sink(&self) -> RecordSink {
        self.sink.clone()
    }

    /// Queue one record (see [`RecordSink::record`]).
    pub async fn record(&self, rec: Record) -> Result<(), RecordError> {
        self.sink.record(rec).await
    }

    /// Write everything queued so far, flush, stop the writer and return the counts. Records
    /// queued through other handles after this are refused with [`RecordError::Stopped`].
    pub async fn finish(self) -> Result<RecordStats, RecordError> {
        let Recorder { sink, done, thread } = self;
        let deadline = tokio::time::Instant::now() + FINISH_DEADLINE;
        // If the writer already failed the send fails too; its error arrives on `done`.
        let _ = tokio::time::timeout_at(deadline, sink.tx.send(Cmd::Finish)).await;
        let r = match tokio::time::timeout_at(deadline, done).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(RecordError::Stopped("the writer thread died".into())),
            Err(_) => return Err(RecordError::Timeout(FINISH_DEADLINE)),
        };
        // It has sent its result, so it is returning: joining does not wait.
        let _ = thread.join();
        r
    }
}

/// Open `path` for writing, readable by its owner only on unix (a recording is redacted,
/// but still a transcript of private traffic): a new file, or, with `replace`, whatever
/// is there truncated.
pub(crate) fn private_file(path: &Path, replace: bool) -> std::io::Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if replace {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

/// Create the recording at `path` (never overwriting) with its magic line and header;
/// the bytes written.
fn open_recording(path: &Path, header: &Header) -> Result<(BufWriter<File>, u64), RecordError> {
    let io = |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut out = BufWriter::new(private_file(path, false).map_err(io)?);
    let head = header.encode_length_delimited_to_vec();
    out.write_all(MAGIC).map_err(io)?;
    out.write_all(&head).map_err(io)?;
    out.flush().map_err(io)?;
    Ok((out, (MAGIC.len() + head.len()) as u64))
}

/// Create the live capture at `path` for the routes of `header`.
fn open_capture(
    path: &Path,
    header: &Header,
) -> Result<crate::pcap::Capture<BufWriter<File>>, RecordError> {
    crate::pcap::Capture::create(path, path, header, None)
        .map_err(|e| RecordError::Capture(e.to_string()))
}

/// The writer thread's outputs.
struct Writers {
    out: Option<BufWriter<File>>,
    pcap: Option<crate::pcap::Capture<BufWriter<File>>>,
}

impl Writers {
    fn flush(&mut self) -> std::io::Result<()> {
        if let Some(o) = self.out.as_mut() {
            o.flush()?;
        }
        if let Some(c) = self.pcap.as_mut() {
            c.flush()?;
        }
        Ok(())
    }
}

fn write_loop(
    mut w: Writers,
    mut rx: mpsc::Receiver<Cmd>,
    mut stats: RecordStats,
    path: &Path,
) -> Result<RecordStats, RecordError> {
    let io = |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut buf = Vec::new();
    loop {
        let cmd = match rx.try_recv() {
            Ok(c) => c,
            Err(mpsc::error::TryRecvError::Empty) => {
                // Idle: make what we have visible (a live `show`, or a crash, sees it all).
                w.flush().map_err(io)?;
                match rx.blocking_recv() {
                    Some(c) => c,
                    None => Cmd::Finish,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => Cmd::Finish,
        };
        match cmd {
            Cmd::Rec(mut rec) => {
                stats.redacted += rec.seal() as u64;
                if let Some(c) = w.pcap.as_mut() {
                    c.record(&rec)
                        .map_err(|e| RecordError::Capture(e.to_string()))?;
                }
                stats.records += 1;
                let Some(out) = w.out.as_mut() else {
                    continue;
                };
                buf.clear();
                rec.encode_length_delimited(&mut buf)
                    .map_err(|e| io(std::io::Error::other(e)))?;
                out.write_all(&buf).map_err(io)?;
                stats.bytes += buf.len() as u64;
            }
            Cmd::Finish => {
                rx.close();
                if let Some(c) = w.pcap.take() {
                    stats.pcap = Some(
                        c.finish()
                            .map_err(|e| RecordError::Capture(e.to_string()))?,
                    );
                }
                if let Some(mut out) = w.out.take() {
                    out.flush().map_err(io)?;
                    out.get_ref().sync_data().map_err(io)?;
                }
                return Ok(stats);
            }
        }
    }
}

/// Reads a recording record by record.
pub struct Reader<R: Read = BufReader<File>> {
    input: R,
    path: PathBuf,
    offset: u64,
    records: u64,
    header: Header,
    done: bool,
}

impl Reader<BufReader<File>> {
    /// Open `path` and read its magic line and header.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let file = File::open(path).map_err(|source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Reader::new(BufReader::new(file), path)
    }
}

impl<R: Read> Reader<R> {
    /// Read the magic line and header from `input`; `path` names it in errors.
    pub fn new(mut input: R, path: &Path) -> Result<Self, RecordError> {
        let mut magic = [0u8; 7];
        let mut got = 0;
        while got < magic.len() {
            match input.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(RecordError::Io {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
        if got < magic.len() || &magic != MAGIC {
            return Err(RecordError::BadMagic {
                path: path.to_path_buf(),
            });
        }
        let mut r = Reader {
            input,
            path: path.to_path_buf(),
            offset: MAGIC.len() as u64,
            records: 0,
            header: Header::default(),
            done: false,
        };
        let start = r.offset;
        let body = r.next_body()?.ok_or_else(|| RecordError::Truncated {
            path: path.to_path_buf(),
            offset: start,
            needed: 0,
            have: 0,
            records: 0,
        })?;
        r.header = Header::decode(body.as_slice()).map_err(|e| RecordError::Corrupt {
            path: path.to_path_buf(),
            offset: start,
            reason: format!("header does not decode: {e}"),
        })?;
        if r.header.format_version != FORMAT_VERSION {
            return Err(RecordError::Version {
                path: path.to_path_buf(),
                found: r.header.format_version,
            });
        }
        Ok(r)
    }

    /// The recording's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Records read so far.
    pub fn records_read(&self) -> u64 {
        self.records
    }

    fn read_byte(&mut self) -> Result<Option<u8>, RecordError> {
        let mut b = [0u8; 1];
        loop {
            return match self.input.read(&mut b) {
                Ok(0) => Ok(None),
                Ok(_) => {
                    self.offset += 1;
                    Ok(Some(b[0]))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => Err(RecordError::Io {
                    path: self.path.clone(),
                    source,
                }),
            };
        }
    }

    /// The next length-delimited body, or `None` at a clean end of file.
    fn next_body(&mut self) -> Result<Option<Vec<u8>>, RecordError> {
        let start = self.offset;
        let path = self.path.clone();
        let truncated = |needed, have, records| RecordError::Truncated {
            path: path.clone(),
            offset: start,
            needed,
            have,
            records,
        };
        let mut len: u64 = 0;
        for i in 0..10u32 {
            let Some(b) = self.read_byte()? else {
                return if i == 0 {
                    Ok(None)
                } else {
                    Err(truncated(0, 0, self.records))
                };
            };
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                break;
            }
            len |= part << (7 * i);
            if b & 0x80 == 0 {
                if len > MAX_RECORD_LEN {
                    return Err(RecordError::TooLong {
                        path: self.path.clone(),
                        offset: start,
                        len,
                        max: MAX_RECORD_LEN,
                    });
                }
                // Reserve what a record usually takes, not what its length claims: a
                // corrupt length costs no more memory than the bytes really there.
                let mut body = Vec::with_capacity(len.min(64 << 10) as usize);
                let got = (&mut self.input)
                    .take(len)
                    .read_to_end(&mut body)
                    .map_err(|source| RecordError::Io {
                        path: self.path.clone(),
                        source,
                    })? as u64;
                self.offset += got;
                if got < len {
                    return Err(truncated(len, got, self.records));
                }
                return Ok(Some(body));
            }
        }
        Err(RecordError::Corrupt {
            path: self.path.clone(),
            offset: start,
            reason: "record length is not a valid varint".into(),
        })
    }

    fn next_record(&mut self) -> Result<Option<Record>, RecordError> {
        let start = self.offset;
        let Some(body) = self.next_body()? else {
            return Ok(None);
        };
        let rec = Record::decode(body.as_slice()).map_err(|e| RecordError::Corrupt {
            path: self.path.clone(),
            offset: start,
            reason: format!("record {} does not decode: {e}", self.records + 1),
        })?;
        self.records += 1;
        Ok(Some(rec))
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record, RecordError>;

    /// The next record; after the first error, nothing more.
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.next_record().transpose();
        if !matches!(r, Some(Ok(_))) {
            self.done = true;
        }
        r
    }
}

/// What [`show`] printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShowStats {
    /// Records read.
    pub records: u64,
    /// Frame records.
    pub frames: u64,
    /// Note records.
    pub notes: u64,
    /// Frames whose recorded verdict was a violation or a framing error.
    pub violations: u64,
}

/// Print a recording like the live view: the header as a note, then one line per frame
/// (through `logger`, so `--log json` and `--filter` apply) and one per connection note.
/// On a corrupt or truncated file, everything before the bad record is printed, then the
/// error is returned.
pub fn show(path: &Path, logger: &Logger) -> Result<ShowStats, RecordError> {
    let reader = Reader::open(path)?;
    let h = reader.header().clone();
    let routes: Vec<String> = h
        .routes
        .iter()
        .map(|r| {
            format!(
                "{} {} → {} ({} / {} connects)",
                r.name, r.listen, r.upstream, r.channel, r.client
            )
        })
        .collect();
    logger.note(
        "recording",
        &format!(
            "{}: contract {} {}, started {}, contract-proxy {}; routes: {}",
            path.display(),
            h.contract,
            h.contract_version,
            clock(h.created_unix_nanos),
            h.proxy_version,
            routes.join("; ")
        ),
    );
    let mut stats = ShowStats::default();
    for rec in reader {
        let rec = rec?;
        stats.records += 1;
        if !rec.note.is_empty() {
            stats.notes += 1;
            logger.note(
                &rec.route,
                &format!("{} conn {}: {}", clock(rec.unix_nanos), rec.conn, rec.note),
            );
        }
        let Some(dir) = rec.direction() else {
            continue;
        };
        stats.frames += 1;
        let event = rec
            .decoded()
            .and_then(|m| m.get("event").and_then(event_from_json))
            .unwrap_or_else(|| bare_event(&h, &rec, dir));
        if !matches!(event.verdict, Verdict::Ok) {
            stats.violations += 1;
        }
        logger.event_at(&event, rec.unix_nanos as f64 / 1e9);
    }
    Ok(stats)
}

/// `HH:MM:SS.mmm` (UTC) of a unix-nanos stamp.
fn clock(nanos: u64) -> String {
    let secs = nanos / 1_000_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        (nanos / 1_000_000) % 1000
    )
}

/// An event for a frame recorded without one (binary data frames).
pub(crate) fn bare_event(h: &Header, rec: &Record, dir: Dir) -> Event {
    let (client, server) = h
        .route(&rec.route)
        .map(|r| (r.client.clone(), r.server.clone()))
        .unwrap_or_default();
    let (from, to) = match dir {
        Dir::Up => (client, server),
        Dir::Down => (server, client),
    };
    Event::bare(
        &rec.route,
        rec.conn,
        rec.conn,
        &rec.channel,
        dir,
        (from, to),
        rec.raw.len(),
    )
}

/// The violation class names the inspector uses, as `'static` strings: the wire's classes,
/// and the rule names of the engine and the extensions (`credit.unknown-key`), which a
/// recording holds as text. Those are kept once each, up to [`CLASS_NAMES_MAX`] names, so
/// a recording cannot grow memory without bound; past it a name reads as `unknown`.
fn class_name(s: &str) -> &'static str {
    use contract::wire::ViolationClass as C;
    use std::sync::{Mutex, OnceLock, PoisonError};
    static NAMES: OnceLock<Mutex<Vec<&'static str>>> = OnceLock::new();
    let wire = [
        C::Oversize,
        C::Parse,
        C::Invalid,
        C::UnknownRequest,
        C::UnknownNotification,
        C::WrongDirection,
        C::InvalidParams,
    ];
    if let Some(n) = wire.into_iter().map(C::name).find(|n| *n == s) {
        return n;
    }
    let names = NAMES.get_or_init(|| Mutex::new(vec!["sequence", "unknown"]));
    let mut names = names.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(n) = names.iter().find(|n| **n == s) {
        return n;
    }
    if names.len() >= CLASS_NAMES_MAX || s.is_empty() {
        return "unknown";
    }
    // Leaked on purpose, once per distinct name, within the bound above.
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    names.push(n);
    n
}

/// Distinct rule names a process reads from recordings.
const CLASS_NAMES_MAX: usize = 512;

/// Rebuild an inspection [`Event`] from its recorded JSON (the inverse of its `Serialize`).
pub fn event_from_json(v: &Value) -> Option<Event> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let dir = match v.get("dir")?.as_str()? {
        "up" => Dir::Up,
        "down" => Dir::Down,
        _ => return None,
    };
    let verdict = v.get("verdict")?;
    let reason = verdict
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let verdict = match verdict.get("verdict")?.as_str()? {
        "ok" => Verdict::Ok,
        "violation" => Verdict::Violation {
            class: class_name(verdict.get("class").and_then(Value::as_str).unwrap_or("")),
            code: verdict.get("code").filter(|c| !c.is_null()).cloned(),
            seed: verdict
                .get("seed")
                .and_then(Value::as_str)
                .map(str::to_string),
            reason,
        },
        "framing" => Verdict::Framing { reason },
        _ => return None,
    };
    let u = |k: &str| v.get(k).and_then(Value::as_u64);
    Some(Event {
        route: s("route")?,
        conn: u("conn").unwrap_or(0),
        session: u("session").or(u("conn")).unwrap_or(0),
        channel: s("channel").unwrap_or_default(),
        dir,
        from: s("from").unwrap_or_default(),
        to: s("to").unwrap_or_default(),
        kind: v
            .get("kind")
            .and_then(|k| serde_json::from_value(k.clone()).ok()),
        method: s("method"),
        id: v.get("id").filter(|i| !i.is_null()).cloned(),
        stream: v
            .get("stream")
            .and_then(|p| Some((p.get(0)?.as_u64()?, p.get(1)?.as_u64()?))),
        size: v
            .get("size")
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
        latency: v
            .get("latency")
            .and_then(Value::as_f64)
            .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms < 1e12)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
        trace: s("trace"),
        error: v.get("error").filter(|c| !c.is_null()).cloned(),
        verdict,
        action: s("action"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_json_round_trips() {
        let e = Event {
            route: "r".into(),
            conn: 3,
            session: 2,
            channel: "ipc".into(),
            stream: Some((4, 9)),
            error: Some(serde_json::json!(-32602)),
            action: Some("refused".into()),
            dir: Dir::Down,
            from: "extension".into(),
            to: "core".into(),
            kind: Some(contract::model::Kind::Response),
            method: Some("rukh.close".into()),
            id: Some(serde_json::json!("c:5")),
            size: 42,
            latency: Some(Duration::from_millis(3)),
            trace: Some("t-1".into()),
            verdict: Verdict::Violation {
                class: "invalid-params",
                code: Some(serde_json::json!(-32602)),
                seed: Some("§4".into()),
                reason: "bad".into(),
            },
        };
        let v = serde_json::to_value(&e).expect("json");
        assert_eq!(event_from_json(&v), Some(e));
    }

    #[test]
    fn an_engine_rule_name_survives_the_round_trip() {
        let v = serde_json::json!({"route": "r", "dir": "up", "verdict": {"verdict": "violation", "class": "credit.unknown-key", "reason": "r"}});
        let e = event_from_json(&v).expect("an event");
        assert!(matches!(
            e.verdict,
            Verdict::Violation {
                class: "credit.unknown-key",
                ..
            }
        ));
        assert_eq!(class_name(""), "unknown");
    }

    #[test]
    fn varint_cap_is_checked_before_reading() {
        let mut file = MAGIC.to_vec();
        file.extend(Header::default().encode_length_delimited_to_vec());
        // Header::default() has version 0: refused with a clear error.
        let err = Reader::new(file.as_slice(), Path::new("x"))
            .err()
            .expect("version refused");
        assert!(
            matches!(err, RecordError::Version { found: 0, .. }),
            "{err}"
        );
        // Eleven continuation bytes are not a varint.
        let mut file = MAGIC.to_vec();
        file.extend([0xffu8; 11]);
        let err = Reader::new(file.as_slice(), Path::new("x"))
            .err()
            .expect("corrupt");
        assert!(
            matches!(err, RecordError::Corrupt { offset: 7, .. }),
            "{err}"
        );
    }
}
