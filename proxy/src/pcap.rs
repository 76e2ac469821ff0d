//! Recordings as pcapng (`show --pcap`, `run --pcap`), for Wireshark and the
//! dissector `contractgen generate --lang wireshark` writes.
//!
//! Each connection becomes a synthetic TCP conversation on loopback: a
//! handshake at its first record, a FIN at its `closed` note. Each frame is
//! framed again as it travelled (length prefix, newline, header lines, binary
//! header; a WebSocket frame after a synthetic HTTP upgrade offering the
//! channel's subprotocol) and cut into segments of at most [`SEGMENT`]
//! bytes, so a dissector reassembles it as it would on a real capture. The
//! first segment of each frame carries a comment with the proxy's verdict;
//! connection notes ride on the next packet of their connection. QUIC, pipe
//! and stdio routes are written as TCP as well: a recording holds a stream's
//! bytes, not the transport's packets.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bytes::BytesMut;
use contract::wire::framing::{BinaryFrame, ChannelCodec, FrameError};
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use tokio_tungstenite::tungstenite::protocol::frame::Frame as WsFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_util::codec::Encoder;

use crate::record::{Form, Header, Reader, Record, RecordError, RouteInfo};

/// Largest TCP segment a capture writes (loopback's MTU is larger;
/// this keeps big frames in several segments, as real captures often have them).
pub const SEGMENT: usize = 32 * 1024;

const LOOPBACK: [u8; 4] = [127, 0, 0, 1];
/// Ports of routes that listen on none (unix, pipe, stdio), and of clients: IANA's dynamic
/// range, where Wireshark registers no dissector that would claim the stream first.
const SERVER_PORTS: u16 = 49_152;
const CLIENT_PORTS: u16 = 50_000;
const MAC_CLIENT: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_SERVER: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// First sequence numbers of the client and the server side.
const ISN: [u32; 2] = [1_000, 500_000];

/// Why a capture could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// Reading the recording failed.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A route's contract could not be found.
    #[error("route {route}: {source}")]
    Contract {
        /// The route.
        route: String,
        /// Why.
        source: contract::LoadError,
    },
    /// A route's channel cannot be framed.
    #[error("route {route}, channel {channel}: {reason}")]
    Channel {
        /// The route.
        route: String,
        /// The channel.
        channel: String,
        /// Why.
        reason: String,
    },
    /// Writing the file failed.
    #[error("{path}: {reason}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// What a capture holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PcapStats {
    /// Connections written as TCP conversations.
    pub connections: u64,
    /// Frames written.
    pub frames: u64,
    /// Packets written.
    pub packets: u64,
    /// Data frames whose header the recording did not keep (files from before `header`
    /// was recorded): written with zeros in the header, and counted here.
    pub headerless: u64,
}

/// How one route's frames go back on the wire.
enum Framer {
    /// A byte stream: the channel's codec frames each message.
    Stream(ChannelCodec),
    /// WebSocket text messages, after an upgrade offering `subprotocol`.
    WebSocket { subprotocol: Option<String> },
}

struct RouteWire {
    framer: Framer,
    server_port: u16,
}

/// One connection's TCP state.
struct Conv {
    client_port: u16,
    server_port: u16,
    /// Next sequence number of the client (0) and the server (1) side.
    next: [u32; 2],
    notes: Vec<String>,
}

/// A pcapng capture being written from records.
pub struct Capture<W: Write> {
    out: PcapNgWriter<W>,
    path: String,
    routes: HashMap<String, RouteWire>,
    conns: HashMap<(String, u64), Conv>,
    /// Notes of connections that have sent no frame yet.
    early: HashMap<(String, u64), Vec<String>>,
    stats: PcapStats,
    /// The time of the last record.
    last: Duration,
}

impl<W: Write> Capture<W> {
    /// A capture of the recording whose header is `header` (`path` names the output in
    /// errors); `contract_of` finds each route's contract.
    pub fn new(
        out: W,
        path: &str,
        header: &Header,
        contract_of: impl Fn(&RouteInfo) -> Result<contract::Contract, contract::LoadError>,
    ) -> Result<Self, PcapError> {
        let write_err = |e: pcap_file::PcapError| PcapError::Write {
            path: path.to_string(),
            reason: e.to_string(),
        };
        let mut out = PcapNgWriter::new(out).map_err(write_err)?;
        out.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName("contract-proxy".into()),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        })
        .map_err(write_err)?;
        let mut routes = HashMap::new();
        for (i, r) in header.routes.iter().enumerate() {
            let c = contract_of(r).map_err(|source| PcapError::Contract {
                route: r.name.clone(),
                source,
            })?;
            routes.insert(r.name.clone(), route_wire(r, i, &c)?);
        }
        Ok(Capture {
            out,
            path: path.to_string(),
            routes,
            conns: HashMap::new(),
            early: HashMap::new(),
            stats: PcapStats::default(),
            last: Duration::ZERO,
        })
    }

    /// Write one record: a frame as packets, a note as a comment on what follows.
    pub fn record(&mut self, rec: &Record) -> Result<(), PcapError> {
        let at = Duration::from_nanos(rec.unix_nanos);
        self.last = at;
        let packets = self.packets_for(rec)?;
        self.write(at, packets)
    }

    /// The packets a record makes, each with its comments.
    fn packets_for(&mut self, rec: &Record) -> Result<Vec<Packet>, PcapError> {
        if !self.routes.contains_key(&rec.route) {
            return Ok(Vec::new());
        }
        let key = (rec.route.clone(), rec.conn);
        let frame = rec.direction().is_some() && rec.form != Form::NoFrame as i32;
        // A connection becomes a conversation at its first frame; notes before it wait.
        if !self.conns.contains_key(&key) && !frame {
            if rec.note == "closed" {
                self.early.remove(&key);
            } else if !rec.note.is_empty() {
                self.early.entry(key).or_default().push(rec.note.clone());
            }
            return Ok(Vec::new());
        }
        let out = self.open(&key);
        let (Some(wire), Some(conv)) = (self.routes.get_mut(&rec.route), self.conns.get_mut(&key))
        else {
            return Ok(out);
        };
        if !rec.note.is_empty() {
            conv.notes.push(rec.note.clone());
        }
        let side = match rec.direction() {
            _ if !frame && rec.note == "closed" => {
                let comments = std::mem::take(&mut conv.notes);
                let fin = close(conv);
                self.conns.remove(&key);
                return Ok(with_comments(out, fin, comments));
            }
            Some(crate::inspect::Dir::Up) if frame => 0,
            Some(crate::inspect::Dir::Down) if frame => 1,
            _ => return Ok(out),
        };
        let bytes = framed(wire, rec, side == 0).map_err(|e| PcapError::Channel {
            route: rec.route.clone(),
            channel: rec.channel.clone(),
            reason: e.to_string(),
        })?;
        if rec.form == Form::Data as i32 && rec.header.is_empty() {
            self.stats.headerless += 1;
        }
        self.stats.frames += 1;
        let mut comments = std::mem::take(&mut conv.notes);
        comments.push(verdict_comment(rec));
        let segs = segments(conv, side, &bytes, SEGMENT);
        Ok(with_comments(out, segs, comments))
    }

    /// The opening packets of `key`'s conversation (none when it is open): the handshake,
    /// and a WebSocket channel's upgrade. Notes that came before carry on the SYN.
    fn open(&mut self, key: &(String, u64)) -> Vec<Packet> {
        let Some(wire) = self.routes.get(&key.0) else {
            return Vec::new();
        };
        if self.conns.contains_key(key) {
            return Vec::new();
        }
        let mut conv = Conv {
            client_port: CLIENT_PORTS + (key.1 % 6_000) as u16,
            server_port: wire.server_port,
            next: ISN,
            notes: Vec::new(),
        };
        let mut opening = handshake(&mut conv);
        if let Framer::WebSocket { subprotocol } = &wire.framer {
            let (up, down) = upgrade(subprotocol.as_deref(), wire.server_port);
            opening.extend(segments(&mut conv, 0, &up, SEGMENT));
            opening.extend(segments(&mut conv, 1, &down, SEGMENT));
        }
        let notes = self.early.remove(key).unwrap_or_default();
        self.conns.insert(key.clone(), conv);
        self.stats.connections += 1;
        with_comments(Vec::new(), opening, notes)
    }

    /// Make what was written so far visible to a reader of the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.get_mut().flush()
    }

    /// Close every connection still open and flush; what was written.
    pub fn finish(mut self) -> Result<PcapStats, PcapError> {
        let mut open: Vec<(String, u64)> = self.conns.keys().cloned().collect();
        open.sort();
        for key in open {
            if let Some(mut conv) = self.conns.remove(&key) {
                let comments = std::mem::take(&mut conv.notes);
                let fin = close(&mut conv);
                // After the last record: stamped with the last time seen.
                self.write(self.last, with_comments(Vec::new(), fin, comments))?;
            }
        }
        let mut w = self.out.into_inner();
        w.flush().map_err(|e| PcapError::Write {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        Ok(self.stats)
    }

    /// Write packets stamped `at`.
    fn write(&mut self, at: Duration, packets: Vec<Packet>) -> Result<(), PcapError> {
        for (data, comments) in packets {
            let block = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: at,
                original_len: data.len() as u32,
                data: data.into(),
                options: comments
                    .into_iter()
                    .map(|c| EnhancedPacketOption::Comment(c.into()))
                    .collect(),
            };
            self.out
                .write_pcapng_block(block)
                .map_err(|e| PcapError::Write {
                    path: self.path.clone(),
                    reason: e.to_string(),
                })?;
            self.stats.packets += 1;
        }
        Ok(())
    }
}

/// A packet's bytes and the comments it carries.
type Packet = (Vec<u8>, Vec<String>);

/// `out`, then `packets` with `comments` on the first of them.
fn with_comments(
    mut out: Vec<Packet>,
    packets: Vec<Vec<u8>>,
    comments: Vec<String>,
) -> Vec<Packet> {
    let mut comments = Some(comments);
    out.extend(
        packets
            .into_iter()
            .map(|p| (p, comments.take().unwrap_or_default())),
    );
    out
}

impl Capture<std::io::BufWriter<std::fs::File>> {
    /// A capture written to the file `out` (replaced if it exists; private to its owner,
    /// as a recording is), each route's contract found in `recording`'s header unless
    /// `given` names one.
    pub fn create(
        out: &Path,
        recording: &Path,
        header: &Header,
        given: Option<&str>,
    ) -> Result<Self, PcapError> {
        let file = crate::record::private_file(out, true).map_err(|e| PcapError::Write {
            path: out.display().to_string(),
            reason: e.to_string(),
        })?;
        Capture::new(
            std::io::BufWriter::new(file),
            &out.display().to_string(),
            header,
            |r| crate::record::route_contract(recording, header, r, given),
        )
    }
}

/// Write the recording at `recording` as pcapng to `out`; `given` names the contract
/// (else each route's recorded one is used).
pub fn export(recording: &Path, out: &Path, given: Option<&str>) -> Result<PcapStats, PcapError> {
    let reader = Reader::open(recording)?;
    let header = reader.header().clone();
    let mut cap = Capture::create(out, recording, &header, given)?;
    for rec in reader {
        cap.record(&rec?)?;
    }
    cap.finish()
}

fn route_wire(r: &RouteInfo, index: usize, c: &contract::Contract) -> Result<RouteWire, PcapError> {
    let channel = c
        .channels
        .get(&r.channel)
        .ok_or_else(|| PcapError::Channel {
            route: r.name.clone(),
            channel: r.channel.clone(),
            reason: format!("contract {} has no such channel", c.name),
        })?;
    let framer = match &channel.framing {
        contract::model::Framing::WebsocketText { subprotocols, .. } => Framer::WebSocket {
            subprotocol: subprotocols.first().cloned(),
        },
        _ => {
            let codec = ChannelCodec::for_channel(&c.evaluated_limits(), channel).map_err(|e| {
                PcapError::Channel {
                    route: r.name.clone(),
                    channel: r.channel.clone(),
                    reason: e.to_string(),
                }
            })?;
            // A frame over the cap travelled as it was; the capture shows it so.
            Framer::Stream(codec.with_cap(u64::MAX))
        }
    };
    Ok(RouteWire {
        framer,
        server_port: listen_port(&r.listen).unwrap_or(SERVER_PORTS + (index % 800) as u16),
    })
}

/// The port a listen endpoint binds (`tcp:`, `tls://`, `ws://`, `wss://`, `quic://`), if it has one.
fn listen_port(listen: &str) -> Option<u16> {
    use contract_transport::endpoint::Endpoint;
    let addr = match listen.parse::<Endpoint>().ok()? {
        Endpoint::Tcp(a) | Endpoint::Tls(a) | Endpoint::Quic(a) | Endpoint::Ws { addr: a, .. } => a,
        _ => return None,
    };
    addr.rsplit_once(':')?.1.parse().ok().filter(|p| *p != 0)
}

/// The bytes a record's frame travelled as.
fn framed(wire: &mut RouteWire, rec: &Record, from_client: bool) -> Result<Vec<u8>, FrameError> {
    let form = Form::try_from(rec.form).unwrap_or(Form::Payload);
    let mut dst = BytesMut::new();
    match (&mut wire.framer, form) {
        (Framer::Stream(_), Form::AsTravelled | Form::BinaryMessage) => {
            dst.extend_from_slice(&rec.raw)
        }
        (Framer::Stream(ChannelCodec::Binary(c)), _) => {
            let fields = if rec.header.is_empty() {
                vec![0; c.field_names().count()]
            } else {
                rec.header.clone()
            };
            let frame = BinaryFrame {
                fields,
                payload: rec.raw.clone().into(),
            };
            c.encode(&frame, &mut dst)?;
        }
        (Framer::Stream(c), _) => c.encode_json(&rec.raw, &mut dst)?,
        (Framer::WebSocket { .. }, form) => {
            let op = if form == Form::BinaryMessage {
                Data::Binary
            } else {
                Data::Text
            };
            let mut frame = WsFrame::message(rec.raw.clone(), OpCode::Data(op), true);
            // A client masks what it sends (RFC 6455 §5.3); a fixed key keeps the file
            // the same for the same recording.
            if from_client {
                frame.header_mut().mask = Some(mask_key(rec));
            }
            let mut out = Vec::new();
            frame
                .format(&mut out)
                .map_err(|e| FrameError::Unsupported(e.to_string()))?;
            return Ok(out);
        }
    }
    Ok(dst.to_vec())
}

fn mask_key(rec: &Record) -> [u8; 4] {
    (rec.unix_nanos as u32 | 1).to_be_bytes()
}

/// The proxy's word on a frame, for its packet comment.
fn verdict_comment(rec: &Record) -> String {
    let event = rec
        .decoded()
        .and_then(|m| m.get("event").and_then(crate::record::event_from_json));
    match event {
        Some(e) => {
            let action = e.action.map(|a| format!("; {a}")).unwrap_or_default();
            format!(
                "contract-proxy {}#{} {}→{}: {}{action}",
                e.route,
                e.conn,
                e.from,
                e.to,
                e.verdict.text()
            )
        }
        None => format!("contract-proxy {}#{}: no inspection", rec.route, rec.conn),
    }
}

/// The HTTP upgrade of a WebSocket connection: the client's request and the server's answer.
fn upgrade(subprotocol: Option<&str>, port: u16) -> (Vec<u8>, Vec<u8>) {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    // The RFC 6455 §1.3 sample key: any fixed key keeps the capture deterministic.
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    let proto = subprotocol
        .map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{proto}\r\n"
    );
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{proto}\r\n",
        derive_accept_key(key.as_bytes())
    );
    (request.into_bytes(), response.into_bytes())
}

/// One Ethernet/IPv4/TCP packet from `side` (0 client, 1 server).
fn packet(conv: &Conv, side: usize, flags: Flags, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = if side == 0 {
        (
            (MAC_CLIENT, conv.client_port),
            (MAC_SERVER, conv.server_port),
        )
    } else {
        (
            (MAC_SERVER, conv.server_port),
            (MAC_CLIENT, conv.client_port),
        )
    };
    let mut tcp = etherparse::TcpHeader::new(src.1, dst.1, conv.next[side], 65_535);
    tcp.syn = flags.syn;
    tcp.fin = flags.fin;
    tcp.psh = !payload.is_empty();
    if flags.ack {
        tcp.ack = true;
        tcp.acknowledgment_number = conv.next[1 - side];
    }
    let builder = etherparse::PacketBuilder::ethernet2(src.0, dst.0)
        .ipv4(LOOPBACK, LOOPBACK, 64)
        .tcp_header(tcp);
    let mut out = Vec::with_capacity(builder.size(payload.len()));
    // Writing into a Vec fails only on a payload too large for IPv4, which `segments`
    // never makes.
    let _ = builder.write(&mut out, payload);
    out
}

#[derive(Clone, Copy, Default)]
struct Flags {
    syn: bool,
    fin: bool,
    ack: bool,
}

/// SYN, SYN-ACK, ACK; advances the sequence.
fn handshake(conv: &mut Conv) -> Vec<Vec<u8>> {
    let syn = Flags {
        syn: true,
        ..Flags::default()
    };
    let ack = Flags {
        ack: true,
        ..Flags::default()
    };
    let mut out = vec![packet(conv, 0, syn, &[])];
    conv.next[0] = conv.next[0].wrapping_add(1);
    out.push(packet(conv, 1, Flags { ack: true, ..syn }, &[]));
    conv.next[1] = conv.next[1].wrapping_add(1);
    out.push(packet(conv, 0, ack, &[]));
    out
}

/// `bytes` from `side` in segments of at most `segment` bytes; advances the sequence.
fn segments(conv: &mut Conv, side: usize, bytes: &[u8], segment: usize) -> Vec<Vec<u8>> {
    // IPv4 carries at most 65,535 bytes with its and TCP's headers.
    let segment = segment.min(65_000);
    let ack = Flags {
        ack: true,
        ..Flags::default()
    };
    bytes
        .chunks(segment)
        .map(|chunk| {
            let p = packet(conv, side, ack, chunk);
            conv.next[side] = conv.next[side].wrapping_add(chunk.len() as u32);
            p
        })
        .collect()
}

/// FIN from each side, then the last ACK.
fn close(conv: &mut Conv) -> Vec<Vec<u8>> {
    let fin = Flags {
        fin: true,
        ack: true,
        ..Flags::default()
    };
    let mut out = vec![packet(conv, 0, fin, &[])];
    conv.next[0] = conv.next[0].wrapping_add(1);
    out.push(packet(conv, 1, fin, &[]));
    conv.next[1] = conv.next[1].wrapping_add(1);
    out.push(packet(
        conv,
        0,
        Flags {
            ack: true,
            ..Flags::default()
        },
        &[],
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_ports_come_from_tcp_and_ws_endpoints_only() {
        assert_eq!(listen_port("tcp:127.0.0.1:4100"), Some(4100));
        assert_eq!(listen_port("ws://127.0.0.1:4200/tools"), Some(4200));
        assert_eq!(listen_port("unix:/tmp/a.sock"), None);
        assert_eq!(listen_port("tcp:127.0.0.1:0"), None);
        assert_eq!(listen_port("stdio"), None);
    }
}
