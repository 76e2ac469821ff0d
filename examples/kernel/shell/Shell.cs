// Reference kernel shell (C#), written on the generated C# SDK (Contract.Sdk.Kernel).
//
// The shell listens on the control and data endpoints, launches the core as a child
// process, and runs a scripted session that exercises the whole kernel protocol:
// hello, a streamed answer, a plain command (with the core's programs.index request),
// a credit-controlled audio stream on the data channel, a permission request (denied,
// then granted), long tasks (done, unknown, cancelled) and heartbeat ping/pong (§13).
// It checks every answer against the contract and exits 0 only if all checks passed.
// With --core none it launches no core: it takes core sessions one after another (a
// conformance target for `contract-proxy conformance --play core`), runs a short script in
// each and serves whatever the core sends (pings, credit, audio in and out, permission
// asks, programs.index, unknown or malformed requests) until the core goes away.
// All messages, payloads, framing, limits and codes come from the generated SDK.
// C# 7.3 syntax (Mono mcs), run on the .NET 8 runtime (see run.sh).
//
// usage: Shell.dll --control EP --data EP --core "CMD ARGS" [--core-control EP] [--core-data EP]
//                  [--session ID] [--break trace-id]
//        Shell.dll --control EP --data EP --core none [--accept-timeout S] [--sessions N] [--break trace-id]
//   EP is unix:PATH or tcp:HOST:PORT. The core is started as
//   /bin/sh -c 'exec CMD ARGS --control <core-control> --data <core-data> --session <id>'.
// Exit: 0 all checks passed (--core none: at least one session was served), 1 a check failed,
// 2 bad usage or setup failure (--core none: no core connected within --accept-timeout).
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using System.Text.Json.Serialization;
using System.Threading;
using Contract.Runtime;
using Contract.Sdk.Kernel;

namespace KernelShell
{
    /// <summary>What the reader threads hand to the script: a control message, a data frame, or a closed channel.</summary>
    sealed class Item
    {
        public Message Msg;
        public BinaryFrame Frame;
        public string Closed;
    }

    /// <summary>Receive side of one binary stream: the credit granted and what arrived.</summary>
    sealed class StreamRx
    {
        public long Id;
        public string Trace;
        public long Granted;
        public long Received;
        public long Consumed;
        public long ConsumedSinceGrant;
        public long NextSeq;
        public bool Overrun;
        public bool Closed;
        public bool PeerClosed;
        public bool PatternOk = true;
    }

    /// <summary>Send side of one microphone (audio.input) stream the core asked for: the credit it granted.</summary>
    sealed class MicTx
    {
        public long Id;
        public long Credit;
        public bool Closed;
        public readonly object Lock = new object();
    }

    sealed class Shell
    {
        // The core's scripted answers (examples/kernel/core.py); the reference pair checks them word for word.
        const string StreamText = "Столица Австралии — Канберра.";
        const long SpeechBytes = 48000;
        const long InitialGrant = 16384;
        const long RegrantStep = 8192;
        static readonly TimeSpan StepDeadline = TimeSpan.FromSeconds(20);

        string controlEp, dataEp, coreCmd, coreControlEp, coreDataEp, session, breakRule;
        // --core none: no core is launched; sessions are taken one after another and served.
        bool serving;
        double acceptTimeoutSeconds = 60;
        int maxSessions;
        // Seconds of synthetic microphone audio a served session sends per audio.input stream.
        const long MicSeconds = 30;
        const int MicFrameBytes = 1024;
        readonly object dataWriteLock = new object();
        readonly Dictionary<long, MicTx> mics = new Dictionary<long, MicTx>();
        Socket controlListener, dataListener;
        Socket controlSock, dataSock;
        Stream control, data;
        Process core;
        readonly object writeLock = new object();
        readonly object checkLock = new object();
        readonly LengthPrefixedFraming controlFraming = Channels.ControlFraming();
        readonly BinaryFraming dataFraming = Channels.DataFraming();
        readonly BlockingCollection<Item> inbox = new BlockingCollection<Item>();
        readonly Dictionary<long, StreamRx> streams = new Dictionary<long, StreamRx>();
        // Dictionary, not HashSet: HashSet lives in System.Collections, whose 3.1 reference clashes with STJ 8 under mcs (CS1705).
        readonly Dictionary<string, bool> coreIds = new Dictionary<string, bool>();

        // The error the contract's id rules for the core answer a broken rule with, if any.
        static bool IdRefusal(out Codes.ErrorCode code)
        {
            code = default(Codes.ErrorCode);
            IdRules rules;
            if (!Rules.IdRulesByParty.TryGetValue("core", out rules) || rules.Code == null) return false;
            using (var doc = JsonDocument.Parse(JsonSerializer.Serialize(rules.Code)))
                return WireNames.TryParseWire(doc.RootElement, out code);
        }
        int nextId;
        long version = 1; // the hello exchange carries v = 1 (K-7)
        volatile bool ready;
        int passed, failed;
        readonly List<string> failures = new List<string>();
        List<string> coreCaps = new List<string>();

        // Liveness (§13, K-13): silence counter on what the core sends.
        long lastRxTicks = DateTime.UtcNow.Ticks;
        long lastTxTicks = DateTime.UtcNow.Ticks;
        string pingOut;
        DateTime pingSentAt;
        int missedPings;
        volatile bool coreDead;
        int corePingsAnswered, pongsReceived, pingsSent;
        readonly Dictionary<string, bool> pingIds = new Dictionary<string, bool>();
        volatile int pongDelayMs;
        long lastCorePingAfterShellTxMs = -1;

        static int Main(string[] args)
        {
            var s = new Shell();
            try
            {
                if (!s.Parse(args)) return 2;
                return s.serving ? s.ServeSessions() : s.Run();
            }
            catch (SetupException e)
            {
                Console.Error.WriteLine("shell: setup failed: " + e.Message);
                s.Cleanup();
                return 2;
            }
        }

        sealed class SetupException : Exception
        {
            public SetupException(string m) : base(m) { }
        }

        bool Parse(string[] args)
        {
            for (int i = 0; i < args.Length; i++)
            {
                string a = args[i];
                string v = i + 1 < args.Length ? args[i + 1] : null;
                switch (a)
                {
                    case "--control": controlEp = v; i++; break;
                    case "--data": dataEp = v; i++; break;
                    case "--core": coreCmd = v; i++; break;
                    case "--core-control": coreControlEp = v; i++; break;
                    case "--core-data": coreDataEp = v; i++; break;
                    case "--session": session = v; i++; break;
                    case "--break": breakRule = v; i++; break;
                    case "--accept-timeout":
                        if (v == null || !double.TryParse(v, System.Globalization.NumberStyles.Float, System.Globalization.CultureInfo.InvariantCulture, out acceptTimeoutSeconds) || acceptTimeoutSeconds <= 0)
                        {
                            Console.Error.WriteLine("shell: --accept-timeout wants a positive number of seconds");
                            return false;
                        }
                        i++; break;
                    case "--sessions":
                        if (v == null || !int.TryParse(v, out maxSessions) || maxSessions < 0)
                        {
                            Console.Error.WriteLine("shell: --sessions wants a count (0 = no limit)");
                            return false;
                        }
                        i++; break;
                    default:
                        Console.Error.WriteLine("shell: unknown argument " + a);
                        return false;
                }
            }
            if (controlEp == null || dataEp == null || coreCmd == null)
            {
                Console.Error.WriteLine("usage: Shell.dll --control EP --data EP --core \"CMD ARGS\"|none [--core-control EP] [--core-data EP] [--session ID] [--accept-timeout S] [--sessions N] [--break trace-id]");
                return false;
            }
            serving = coreCmd == "none";
            if (breakRule != null && breakRule != "trace-id")
            {
                Console.Error.WriteLine("shell: unknown --break rule " + breakRule + " (known: trace-id)");
                return false;
            }
            if (coreControlEp == null) coreControlEp = controlEp;
            if (coreDataEp == null) coreDataEp = dataEp;
            if (session == null) session = Guid.NewGuid().ToString("N").Substring(0, 12);
            return true;
        }

        // ------------------------------------------------------------------ checks

        void Check(bool ok, string what)
        {
            lock (checkLock)
            {
                if (ok)
                {
                    passed++;
                    Console.WriteLine("  ok    " + what);
                }
                else
                {
                    failed++;
                    failures.Add(what);
                    Console.WriteLine("  FAIL  " + what);
                }
            }
        }

        static void Say(string s) { Console.WriteLine(s); }

        // ------------------------------------------------------------------ transport

        static Socket Listen(string ep)
        {
            Socket s;
            if (ep.StartsWith("unix:"))
            {
                string path = ep.Substring(5);
                if (File.Exists(path)) File.Delete(path);
                s = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
                s.Bind(new UnixDomainSocketEndPoint(path));
            }
            else if (ep.StartsWith("tcp:"))
            {
                string hp = ep.Substring(4);
                int colon = hp.LastIndexOf(':');
                string host = colon > 0 ? hp.Substring(0, colon) : "127.0.0.1";
                int port = int.Parse(colon >= 0 ? hp.Substring(colon + 1) : hp);
                s = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                s.Bind(new IPEndPoint(IPAddress.Parse(host), port));
            }
            else throw new SetupException("bad endpoint " + ep + " (want unix:PATH or tcp:HOST:PORT)");
            s.Listen(4);
            return s;
        }

        Socket Accept(Socket listener, TimeSpan deadline, string what)
        {
            var until = DateTime.UtcNow + deadline;
            while (DateTime.UtcNow < until)
            {
                if (listener.Poll(100000, SelectMode.SelectRead)) return listener.Accept();
                if (core != null && core.HasExited) throw new SetupException("core exited with " + core.ExitCode + " before connecting its " + what + " channel");
            }
            throw new SetupException("core did not connect its " + what + " channel within " + deadline.TotalSeconds + " s");
        }

        static string Quote(string s) { return "'" + s.Replace("'", "'\\''") + "'"; }

        void StartCore()
        {
            string cmd = "exec " + coreCmd + " --control " + Quote(coreControlEp) + " --data " + Quote(coreDataEp) + " --session " + Quote(session);
            var psi = new ProcessStartInfo("/bin/sh");
            psi.ArgumentList.Add("-c");
            psi.ArgumentList.Add(cmd);
            psi.UseShellExecute = false;
            Say("shell: launching core: " + cmd);
            core = Process.Start(psi);
        }

        void Cleanup()
        {
            try { if (control != null) control.Dispose(); } catch (Exception) { }
            try { if (data != null) data.Dispose(); } catch (Exception) { }
            try { if (controlListener != null) controlListener.Dispose(); } catch (Exception) { }
            try { if (dataListener != null) dataListener.Dispose(); } catch (Exception) { }
            foreach (var ep in new[] { controlEp, dataEp })
            {
                try { if (ep != null && ep.StartsWith("unix:") && File.Exists(ep.Substring(5))) File.Delete(ep.Substring(5)); } catch (Exception) { }
            }
            if (core != null && !core.HasExited)
            {
                if (!core.WaitForExit(3000))
                {
                    try { core.Kill(); } catch (Exception) { }
                }
            }
        }

        // ------------------------------------------------------------------ messages

        string NewId() { return "s-" + Interlocked.Increment(ref nextId).ToString("D4"); }
        static string NewTrace(string what) { return "t-" + what + "-" + Guid.NewGuid().ToString("N").Substring(0, 6); }
        static double Now() { return DateTimeOffset.UtcNow.ToUnixTimeMilliseconds() / 1000.0; }

        static Dictionary<string, JsonElement> ToPayload<T>(T value)
        {
            return JsonSerializer.Deserialize<Dictionary<string, JsonElement>>(Codec.Encode(value, typeof(T)));
        }

        static T FromPayload<T>(Dictionary<string, JsonElement> payload)
        {
            return (T)Codec.Decode(JsonSerializer.Serialize(payload), typeof(T));
        }

        static Dictionary<string, JsonElement> Empty() { return new Dictionary<string, JsonElement>(); }

        /// <summary>The same JSON object without one member (for --break trace-id).</summary>
        static byte[] WithoutMember(byte[] json, string member)
        {
            using (var doc = JsonDocument.Parse(json))
            using (var ms = new MemoryStream())
            {
                using (var w = new Utf8JsonWriter(ms))
                {
                    w.WriteStartObject();
                    foreach (var p in doc.RootElement.EnumerateObject())
                    {
                        if (p.Name == member) continue;
                        p.WriteTo(w);
                    }
                    w.WriteEndObject();
                }
                return ms.ToArray();
            }
        }

        void Send(Message m, Type t, bool dropTrace)
        {
            byte[] bytes = Codec.EncodeUtf8(m, t);
            if (dropTrace) bytes = WithoutMember(bytes, "trace_id");
            lock (writeLock)
            {
                controlFraming.WriteFrame(control, bytes);
                control.Flush();
            }
            Interlocked.Exchange(ref lastTxTicks, DateTime.UtcNow.Ticks);
        }

        RequestMessage Request(string method, string trace, Dictionary<string, JsonElement> payload, bool dropTrace)
        {
            var r = new RequestMessage(v: version, id: NewId(), timestamp: Now(), traceId: trace, method: method, payload: payload);
            Send(r, typeof(RequestMessage), dropTrace);
            return r;
        }

        RequestMessage Request(string method, string trace, Dictionary<string, JsonElement> payload)
        {
            return Request(method, trace, payload, false);
        }

        void Respond(RequestMessage req, Dictionary<string, JsonElement> payload)
        {
            var r = new ResponseMessage(v: version, id: NewId(), timestamp: Now(), traceId: req.TraceId, correlationId: req.Id, payload: payload);
            Send(r, typeof(ResponseMessage), false);
        }

        void Event(string method, string trace, Dictionary<string, JsonElement> payload, long? streamId, string correlation)
        {
            var e = new EventMessage(v: version, id: NewId(), timestamp: Now(), traceId: trace, method: method, payload: payload,
                                     streamId: streamId, correlationId: correlation);
            Send(e, typeof(EventMessage), false);
        }

        void Error(Codes.ErrorCode code, string text, string trace, long? streamId)
        {
            var e = new ErrorMessage(v: version, id: NewId(), timestamp: Now(), traceId: trace, streamId: streamId,
                                     payload: Body(code, text, null));
            Send(e, typeof(ErrorMessage), false);
        }

        /// <summary>Reads and drops <paramref name="length"/> bytes; false when the channel ended first.</summary>
        static bool Skip(Stream s, ulong length)
        {
            var buf = new byte[64 * 1024];
            while (length > 0)
            {
                int want = (int)Math.Min((ulong)buf.Length, length);
                int n = s.Read(buf, 0, want);
                if (n == 0) return false;
                length -= (ulong)n;
            }
            return true;
        }

        /// <summary>The error body the catalog gives <paramref name="code"/>: its category and retryable flag.</summary>
        static ErrorBody Body(Codes.ErrorCode code, string text, ErrorDetails details)
        {
            ErrorCategory cat;
            WireNames.TryParse(code.Category(), out cat);
            return new ErrorBody(code: code.ToWire(), category: cat, retryable: code.IsRetryable(), message: text, details: details);
        }

        /// <summary>An error answering the core's request <paramref name="correlation"/>.</summary>
        void ErrorReply(Codes.ErrorCode code, string text, string trace, string correlation, ErrorDetails details)
        {
            var e = new ErrorMessage(v: version, id: NewId(), timestamp: Now(), traceId: trace, correlationId: correlation,
                                     payload: Body(code, text, details));
            Send(e, typeof(ErrorMessage), false);
        }

        /// <summary>
        /// For a control frame the SDK refused: its type, id and trace_id (when readable) and the
        /// envelope members at fault: every required member (per the SDK type's [JsonRequired]
        /// properties) that is absent, else the member the decoder named.
        /// </summary>
        static List<string> EnvelopeFault(byte[] frame, ContractException e, out string type, out string id, out string trace)
        {
            type = null; id = null; trace = null;
            var fields = new List<string>();
            JsonElement root;
            try
            {
                // Deeper than System.Text.Json's default of 64, so a frame refused for its depth
                // still shows its id.
                var deep = new JsonDocumentOptions { MaxDepth = 1024 };
                using (var doc = JsonDocument.Parse(frame, deep)) root = doc.RootElement.Clone();
            }
            catch (JsonException)
            {
                return fields;
            }
            if (root.ValueKind != JsonValueKind.Object) return fields;
            JsonElement x;
            if (root.TryGetProperty("type", out x) && x.ValueKind == JsonValueKind.String) type = x.GetString();
            if (root.TryGetProperty("id", out x) && x.ValueKind == JsonValueKind.String) id = x.GetString();
            if (root.TryGetProperty("trace_id", out x) && x.ValueKind == JsonValueKind.String) trace = x.GetString();
            System.Type t = type == "request" ? typeof(RequestMessage) : type == "response" ? typeof(ResponseMessage)
                   : type == "event" ? typeof(EventMessage) : type == "error" ? typeof(ErrorMessage) : null;
            if (t == null) { fields.Add("type"); return fields; }
            foreach (var p in t.GetProperties())
            {
                if (!p.IsDefined(typeof(JsonRequiredAttribute), false)) continue;
                var name = (JsonPropertyNameAttribute)Attribute.GetCustomAttribute(p, typeof(JsonPropertyNameAttribute));
                if (name != null && !root.TryGetProperty(name.Name, out x)) fields.Add(name.Name);
            }
            if (fields.Count == 0)
            {
                // The SDK's messages quote the member: "'v' = 0 is outside 1..", "'trace_id': must not be null".
                int a = e.Message.IndexOf('\''), b = a >= 0 ? e.Message.IndexOf('\'', a + 1) : -1;
                if (b > a + 1) fields.Add(e.Message.Substring(a + 1, b - a - 1));
            }
            return fields;
        }

        static string Describe(Message m)
        {
            var rq = m as RequestMessage;
            if (rq != null) return "request " + rq.Method + " " + rq.Id;
            var rs = m as ResponseMessage;
            if (rs != null) return "response to " + rs.CorrelationId;
            var ev = m as EventMessage;
            if (ev != null) return "event " + ev.Method + (ev.StreamId.HasValue ? " stream " + ev.StreamId : "");
            var er = m as ErrorMessage;
            if (er != null) return "error " + er.Payload.Code + " to " + er.CorrelationId;
            return "?";
        }

        static string Trace(Message m)
        {
            var rq = m as RequestMessage; if (rq != null) return rq.TraceId;
            var rs = m as ResponseMessage; if (rs != null) return rs.TraceId;
            var ev = m as EventMessage; if (ev != null) return ev.TraceId;
            var er = m as ErrorMessage; if (er != null) return er.TraceId;
            return null;
        }

        static long V(Message m)
        {
            var rq = m as RequestMessage; if (rq != null) return rq.V;
            var rs = m as ResponseMessage; if (rs != null) return rs.V;
            var ev = m as EventMessage; if (ev != null) return ev.V;
            var er = m as ErrorMessage; if (er != null) return er.V;
            return 0;
        }

        static string Id(Message m)
        {
            var rq = m as RequestMessage; if (rq != null) return rq.Id;
            var rs = m as ResponseMessage; if (rs != null) return rs.Id;
            var ev = m as EventMessage; if (ev != null) return ev.Id;
            var er = m as ErrorMessage; if (er != null) return er.Id;
            return null;
        }

        // ------------------------------------------------------------------ reader threads

        void ControlReader()
        {
            try
            {
                while (true)
                {
                    byte[] frame;
                    try
                    {
                        frame = controlFraming.ReadFrame(control);
                    }
                    catch (FrameTooLargeException e)
                    {
                        // Skip the declared bytes unread, then report without correlation_id:
                        // the frame's id was never read (K-2).
                        Say("shell: skipping a control frame of " + e.Length + " bytes (cap " + e.Cap + ")");
                        if (!Skip(control, e.Length)) break;
                        var d = new ErrorDetails(length: (long)e.Length);
                        ErrorReply(Codes.ErrorCode.ProtocolFrameTooLarge, "Кадр в " + e.Length + " байт больше предела " + e.Cap + ".", NewTrace("oversize"), null, d);
                        continue;
                    }
                    if (frame == null) break;
                    Interlocked.Exchange(ref lastRxTicks, DateTime.UtcNow.Ticks);
                    // Any message counts as a pong (§13).
                    pingOut = null;
                    missedPings = 0;
                    Message m;
                    try
                    {
                        m = Channels.DecodeControlMessage(frame);
                    }
                    catch (ContractException e)
                    {
                        string what = "core sent a control frame the contract refuses (" + e.Label + "): " + Encoding.UTF8.GetString(frame);
                        // Serving, the peer is under test: its faults are answered, not counted.
                        if (serving) Say("shell: " + what); else Check(false, what);
                        string type, rid, rtrace;
                        var fields = EnvelopeFault(frame, e, out type, out rid, out rtrace);
                        // A request, or a frame whose kind cannot be read, gets protocol.invalid_envelope
                        // naming the fields (K-4), to its id when readable; responses, events and errors
                        // are only logged (K-15).
                        if (type != "response" && type != "event" && type != "error")
                        {
                            var d = new ErrorDetails(fields: fields.Count > 0 ? fields : null);
                            ErrorReply(Codes.ErrorCode.ProtocolInvalidEnvelope, "Неверный конверт сообщения: " + e.Message,
                                       rtrace ?? NewTrace("invalid"), rid, d);
                        }
                        continue;
                    }
                    string id = Id(m);
                    bool reused;
                    lock (coreIds)
                    {
                        reused = coreIds.ContainsKey(id);
                        coreIds[id] = true;
                    }
                    if (reused)
                    {
                        string what = "core reused message id " + id + " (K-5)";
                        if (serving) Say("shell: " + what); else Check(false, what);
                        // A request under a used id is refused, not carried out (K-5).
                        var again = m as RequestMessage;
                        Codes.ErrorCode refusal;
                        if (again != null && IdRefusal(out refusal))
                        {
                            var d = new ErrorDetails(fields: new List<string> { "id" });
                            ErrorReply(refusal, "id " + id + " was used before (K-5)", again.TraceId, again.Id, d);
                            continue;
                        }
                    }
                    if (ready && V(m) != version) Check(false, Describe(m) + ": v=" + V(m) + ", negotiated " + version);
                    var ev = m as EventMessage;
                    if (ev != null && ev.Method == Methods.Ping)
                    {
                        long quietMs = (DateTime.UtcNow.Ticks - Interlocked.Read(ref lastTxTicks)) / TimeSpan.TicksPerMillisecond;
                        Interlocked.Exchange(ref lastCorePingAfterShellTxMs, quietMs);
                        Say("shell: <- ping " + ev.Id + " after " + quietMs + " ms of shell silence");
                        if (pongDelayMs > 0) Thread.Sleep(pongDelayMs);
                        Event(Methods.Pong, ev.TraceId, Empty(), null, ev.Id);
                        Interlocked.Increment(ref corePingsAnswered);
                        continue;
                    }
                    if (ev != null && ev.Method == Methods.Pong)
                    {
                        Say("shell: <- pong to " + ev.CorrelationId);
                        bool ours;
                        lock (pingIds) ours = ev.CorrelationId != null && pingIds.ContainsKey(ev.CorrelationId);
                        if (ours) Interlocked.Increment(ref pongsReceived);
                        else Check(false, "pong " + ev.Id + " correlates to " + ev.CorrelationId + ", not a ping the shell sent (K-13)");
                        continue;
                    }
                    inbox.Add(new Item { Msg = m });
                }
            }
            catch (Exception e)
            {
                if (!(e is ObjectDisposedException)) Say("shell: control channel: " + e.Message);
            }
            inbox.Add(new Item { Closed = "control" });
        }

        void DataReader()
        {
            try
            {
                while (true)
                {
                    BinaryFrame f = dataFraming.ReadFrame(data);
                    if (f == null) break;
                    long sid = (long)f.Header[1];
                    long seq = (long)f.Header[2];
                    StreamRx s;
                    bool overrun = false;
                    lock (streams)
                    {
                        if (!streams.TryGetValue(sid, out s) || s.Closed)
                        {
                            // Late frames race with stream.close; unknown streams are discarded (K-3).
                            if (s == null) Say("shell: data for unknown stream " + sid + " discarded");
                            continue;
                        }
                        if (seq != s.NextSeq) Check(false, "stream " + sid + ": seq " + seq + ", expected " + s.NextSeq + " (K-3)");
                        s.NextSeq = seq + 1;
                        if (s.Received + f.Payload.Length > s.Granted)
                        {
                            overrun = true;
                            s.Overrun = true;
                            s.Closed = true;
                        }
                        else s.Received += f.Payload.Length;
                    }
                    if (overrun)
                    {
                        // K-10: discard the excess, report it with the stream_id, close the stream.
                        Check(false, "stream " + sid + ": frame seq " + seq + " of " + f.Payload.Length + " bytes exceeds the granted credit (granted " + s.Granted + ", received " + s.Received + ") (§8)");
                        Error(Codes.ErrorCode.ProtocolCreditExceeded, "Превышен кредит потока " + sid + ".", s.Trace, sid);
                        Event(Methods.StreamClose, s.Trace, Empty(), sid, null);
                        continue;
                    }
                    inbox.Add(new Item { Frame = f });
                }
            }
            catch (Exception e)
            {
                if (!(e is ObjectDisposedException)) Say("shell: data channel: " + e.Message);
            }
            inbox.Add(new Item { Closed = "data" });
        }

        void Liveness()
        {
            // CONTRACT_TIME_SCALE (set by a test run, honoured by every party) shortens the
            // contract's heartbeat timers; unset, they are the contract's.
            double scale = 1.0;
            string scaled = Environment.GetEnvironmentVariable("CONTRACT_TIME_SCALE");
            if (scaled != null) scale = double.Parse(scaled, System.Globalization.CultureInfo.InvariantCulture);
            TimeSpan answer = TimeSpan.FromTicks((long)(Limits.PingAnswerSeconds.Ticks * scale));
            TimeSpan quiet = TimeSpan.FromTicks((long)(Limits.HeartbeatSilenceSeconds.Ticks * scale));
            while (!coreDead)
            {
                Thread.Sleep(50);
                if (!ready || control == null) continue;
                var now = DateTime.UtcNow;
                var silence = TimeSpan.FromTicks(now.Ticks - Interlocked.Read(ref lastRxTicks));
                try
                {
                    if (pingOut != null)
                    {
                        if (now - pingSentAt < answer) continue;
                        missedPings++;
                        Say("shell: ping " + pingOut + " missed (" + missedPings + "/" + Limits.MissedPingsDead + ")");
                        if (missedPings >= Limits.MissedPingsDead)
                        {
                            coreDead = true;
                            inbox.Add(new Item { Closed = "dead" });
                            return;
                        }
                    }
                    else if (silence <= quiet) continue;
                    string trace = NewTrace("ping");
                    var e = new EventMessage(v: version, id: NewId(), timestamp: Now(), traceId: trace, method: Methods.Ping, payload: Empty());
                    pingOut = e.Id;
                    pingSentAt = now;
                    lock (pingIds) pingIds[e.Id] = true;
                    Say("shell: -> ping " + e.Id + " after " + (long)silence.TotalMilliseconds + " ms of core silence");
                    Send(e, typeof(EventMessage), false);
                    Interlocked.Increment(ref pingsSent);
                }
                catch (Exception ex)
                {
                    if (!(ex is ObjectDisposedException)) Say("shell: liveness: " + ex.Message);
                    return;
                }
            }
        }

        // ------------------------------------------------------------------ script plumbing

        /// <summary>The next control message for the script (data frames are consumed on the way), or null at the deadline or a closed channel.</summary>
        Message Next(DateTime deadline)
        {
            while (true)
            {
                int ms = (int)Math.Max(0, (deadline - DateTime.UtcNow).TotalMilliseconds);
                Item it;
                if (!inbox.TryTake(out it, ms)) return null;
                if (it.Frame != null)
                {
                    Consume(it.Frame);
                    continue;
                }
                if (it.Closed != null)
                {
                    string what = it.Closed == "dead" ? "core declared dead after " + Limits.MissedPingsDead + " missed pings (§13)" : "core closed the " + it.Closed + " channel mid-script";
                    if (serving) Say("shell: " + what); else Check(false, what);
                    inbox.Add(it); // keep later waits from blocking until their deadlines
                    return null;
                }
                if (Generic(it.Msg)) continue;
                return it.Msg;
            }
        }

        /// <summary>Core→shell requests the script does not steer: programs.index.</summary>
        bool Generic(Message m)
        {
            var rq = m as RequestMessage;
            // Before the handshake every request is out of place (Hello answers it).
            if (rq == null || rq.Method != Methods.ProgramsIndex || !ready) return false;
            Say("shell: <- programs.index " + rq.Id + " trace=" + rq.TraceId);
            try
            {
                FromPayload<ProgramsIndexParams>(rq.Payload);
            }
            catch (ContractException e)
            {
                Check(false, "programs.index params: " + e.Message);
            }
            var entry = new ProgramEntry(name: "Telegram", path: "/usr/bin/telegram-desktop", aliases: new List<string> { "телеграм" });
            var result = new ProgramsIndexResult(programs: new List<ProgramEntry> { entry });
            pendingIndexTrace = rq.TraceId;
            Respond(rq, ToPayload(result));
            return true;
        }

        string pendingIndexTrace;

        /// <summary>Play received audio: check the pattern, then return the credit it used (credit follows processing, §8).</summary>
        void Consume(BinaryFrame f)
        {
            long sid = (long)f.Header[1];
            StreamRx s;
            lock (streams)
            {
                if (!streams.TryGetValue(sid, out s)) return;
            }
            for (int i = 0; i < f.Payload.Length; i++)
            {
                if (f.Payload[i] != (byte)(((s.Consumed + i) * 7 + 3) & 0xFF)) { s.PatternOk = false; break; }
            }
            s.Consumed += f.Payload.Length;
            s.ConsumedSinceGrant += f.Payload.Length;
            // No credit once the sender closed the stream: it would name a closed stream.
            if (!s.Closed && !s.PeerClosed && s.ConsumedSinceGrant >= RegrantStep) Grant(s, s.ConsumedSinceGrant);
        }

        void Grant(StreamRx s, long bytes)
        {
            lock (streams)
            {
                // Raise the allowance before the core can see it, so no frame races the bookkeeping.
                s.Granted += bytes;
                s.ConsumedSinceGrant = 0;
            }
            var p = new StreamCreditParams(bytes: bytes);
            Event(Methods.StreamCredit, s.Trace, ToPayload(p), s.Id, null);
        }

        void Unexpected(Message m, string step)
        {
            Check(false, step + ": unexpected " + Describe(m) + " trace=" + Trace(m));
        }

        void CheckTrace(Message m, string trace, string step)
        {
            if (Trace(m) != trace) Check(false, step + ": " + Describe(m) + " carries trace_id " + Trace(m) + ", not the request's " + trace + " (§14)");
        }

        T Result<T>(ResponseMessage r, string step) where T : class
        {
            try
            {
                return FromPayload<T>(r.Payload);
            }
            catch (ContractException e)
            {
                Check(false, step + ": result is not a " + typeof(T).Name + ": " + e.Message);
                return null;
            }
        }

        // ------------------------------------------------------------------ the script

        int Run()
        {
            controlListener = Listen(controlEp);
            dataListener = Listen(dataEp);
            Say("shell: listening on control " + controlEp + ", data " + dataEp + " (session " + session + ")");
            StartCore();
            // The core dials control, then data (K-1).
            controlSock = Accept(controlListener, TimeSpan.FromSeconds(15), "control");
            control = new NetworkStream(controlSock, true);
            dataSock = Accept(dataListener, TimeSpan.FromSeconds(10), "data");
            data = new NetworkStream(dataSock, true);
            Say("shell: core connected both channels");
            StartThread(ControlReader, "control-reader");
            StartThread(DataReader, "data-reader");
            StartThread(Liveness, "liveness");

            if (Hello())
            {
                StreamedAnswer();
                PlainCommand();
                Speech();
                Permission();
                Tasks();
                Heartbeat();
            }

            // Closing the channels is the shell going away; the core must exit (§13).
            Say("shell: closing the channels");
            coreDead = true;
            try { controlSock.Shutdown(SocketShutdown.Both); } catch (Exception) { }
            try { dataSock.Shutdown(SocketShutdown.Both); } catch (Exception) { }
            bool exited = core.WaitForExit(5000);
            Check(exited && core.ExitCode == 0, "core exits with 0 once the shell closed the channels (got " + (exited ? core.ExitCode.ToString() : "still running") + ")");
            Cleanup();
            Say("");
            Say("shell: " + passed + " passed, " + failed + " failed" + (breakRule != null ? " (--break " + breakRule + " was on)" : ""));
            foreach (var f in failures) Say("shell:   failed: " + f);
            return failed == 0 ? 0 : 1;
        }

        // ------------------------------------------------------------------ --core none: serving sessions

        /// <summary>
        /// Listen once, then take core sessions one after another (a shell whose core restarts):
        /// each gets a fresh session object, a hello, a short script and service until the core
        /// goes away. Ends when no core connects within --accept-timeout, or after --sessions.
        /// </summary>
        int ServeSessions()
        {
            controlListener = Listen(controlEp);
            dataListener = Listen(dataEp);
            Say("shell: serving: listening on control " + controlEp + ", data " + dataEp + " (no core launched)");
            int sessions = 0;
            try
            {
                while (maxSessions == 0 || sessions < maxSessions)
                {
                    Socket cs, ds;
                    try
                    {
                        // The core dials control, then data (K-1).
                        cs = Accept(controlListener, TimeSpan.FromSeconds(acceptTimeoutSeconds), "control");
                    }
                    catch (SetupException e)
                    {
                        Say("shell: " + e.Message + "; " + sessions + " session(s) served");
                        return sessions > 0 ? 0 : 2;
                    }
                    try
                    {
                        ds = Accept(dataListener, TimeSpan.FromSeconds(10), "data");
                    }
                    catch (SetupException e)
                    {
                        Say("shell: " + e.Message + "; dropping that session");
                        try { cs.Dispose(); } catch (Exception) { }
                        continue;
                    }
                    sessions++;
                    var one = new Shell();
                    one.controlEp = controlEp; one.dataEp = dataEp; one.coreCmd = coreCmd; one.serving = true;
                    one.breakRule = breakRule; one.session = session + "-" + sessions;
                    string end = one.Serve(cs, ds);
                    Say("shell: session " + sessions + " ended: " + end);
                }
                return 0;
            }
            finally
            {
                Cleanup();
            }
        }

        /// <summary>One served session on accepted sockets; why it ended.</summary>
        string Serve(Socket cs, Socket ds)
        {
            controlSock = cs; control = new NetworkStream(cs, true);
            dataSock = ds; data = new NetworkStream(ds, true);
            StartThread(ControlReader, "control-reader");
            StartThread(DataReader, "data-reader");
            StartThread(Liveness, "liveness");
            string end;
            try
            {
                end = Hello() ? ServeLoop() : "no handshake";
            }
            catch (Exception e)
            {
                // A write to a vanished core: the session is over, the shell stays up for the next one.
                end = "I/O: " + e.Message;
            }
            coreDead = true; // stops the liveness thread
            lock (mics)
            {
                foreach (var mic in mics.Values) lock (mic.Lock) { mic.Closed = true; Monitor.PulseAll(mic.Lock); }
            }
            try { controlSock.Shutdown(SocketShutdown.Both); } catch (Exception) { }
            try { dataSock.Shutdown(SocketShutdown.Both); } catch (Exception) { }
            try { control.Dispose(); } catch (Exception) { }
            try { data.Dispose(); } catch (Exception) { }
            return end;
        }

        /// <summary>
        /// The served session's own script, one request every 50 ms after hello (its answers are
        /// only logged), while everything the core sends is served. The second request (the third
        /// of the session, counting hello) is the one --break trace-id sends without trace_id.
        /// </summary>
        string ServeLoop()
        {
            var script = new List<KeyValuePair<string, Dictionary<string, JsonElement>>>();
            foreach (var c in new[] { new[] { "Какая столица Австралии? Расскажи.", "typed" }, new[] { "запусти телеграм", "voice" } })
            {
                var p = new CommandHandleParams(text: c[0], source: c[1] == "voice" ? CommandSource.Voice : CommandSource.Typed);
                script.Add(new KeyValuePair<string, Dictionary<string, JsonElement>>(Methods.CommandHandle, ToPayload(p)));
            }
            script.Add(new KeyValuePair<string, Dictionary<string, JsonElement>>(Methods.SettingsDescribe, Empty()));
            int sent = 0;
            var nextAt = DateTime.UtcNow;
            while (true)
            {
                if (sent < script.Count && DateTime.UtcNow >= nextAt)
                {
                    bool drop = breakRule == "trace-id" && sent == 1;
                    var rq = Request(script[sent].Key, NewTrace("serve"), script[sent].Value, drop);
                    Say("shell: -> " + Describe(rq) + (drop ? " (--break trace-id: WITHOUT trace_id)" : ""));
                    sent++;
                    nextAt = DateTime.UtcNow + TimeSpan.FromMilliseconds(50);
                }
                Item it;
                if (!inbox.TryTake(out it, 50)) continue;
                if (it.Frame != null) { Consume(it.Frame); continue; }
                if (it.Closed == "data")
                {
                    // A data-channel break closes every stream (§8); control goes on.
                    Say("shell: the core's data channel ended");
                    lock (streams) foreach (var st in streams.Values) st.Closed = true;
                    continue;
                }
                if (it.Closed != null) return it.Closed == "dead" ? "the core missed " + Limits.MissedPingsDead + " pings: dead (§13)" : "the core closed the " + it.Closed + " channel";
                if (Generic(it.Msg)) continue;
                ServeMessage(it.Msg);
            }
        }

        /// <summary>What a served session does with a core message no script step waits for.</summary>
        void ServeMessage(Message m)
        {
            var rq = m as RequestMessage;
            var ev = m as EventMessage;
            if (rq != null && rq.Method == Methods.PermissionRequest)
            {
                PermissionRequestParams ask;
                try
                {
                    ask = FromPayload<PermissionRequestParams>(rq.Payload);
                }
                catch (ContractException e)
                {
                    var d = new ErrorDetails(fields: new List<string> { "payload" });
                    ErrorReply(Codes.ErrorCode.ProtocolInvalidPayload, "permission.request: " + e.Message, rq.TraceId, rq.Id, d);
                    return;
                }
                // Nobody sits at a served shell to say yes: the dialog is shown (logged) and answered no.
                Say("shell: [dialog] " + ask.Permission + "/" + ask.Action + ": " + ask.Preview + " (ttl " + ask.Ttl + " s) -> no (no user at a served shell)");
                var ans = new PermissionResult(requestId: ask.RequestId, granted: false);
                Respond(rq, ToPayload(ans));
                return;
            }
            if (rq != null)
            {
                // Unknown here, wrong direction, or one this shell does not serve.
                var d = new ErrorDetails(method: rq.Method);
                ErrorReply(Codes.ErrorCode.ProtocolUnknownMethod, "Метод " + rq.Method + " оболочка не поддерживает.", rq.TraceId, rq.Id, d);
                return;
            }
            if (ev != null && ev.Method == Methods.StreamOpen)
            {
                StreamOpenParams op;
                try
                {
                    op = FromPayload<StreamOpenParams>(ev.Payload);
                }
                catch (ContractException e)
                {
                    Say("shell: ignored an invalid stream.open: " + e.Message); // invalid event: ignore and log (K-15)
                    return;
                }
                if (op.Kind == StreamKind.AudioOutput)
                {
                    var st = new StreamRx();
                    st.Id = op.StreamId;
                    st.Trace = ev.TraceId;
                    st.Granted = Limits.InitialCreditBytes;
                    lock (streams) streams[st.Id] = st;
                    Say("shell: <- stream.open audio.output " + st.Id + "; -> stream.credit " + InitialGrant);
                    Grant(st, InitialGrant);
                }
                else if (op.Kind == StreamKind.AudioInput)
                {
                    var mic = new MicTx();
                    mic.Id = op.StreamId;
                    mic.Credit = Limits.InitialCreditBytes; // nothing flows before the first stream.credit (§8)
                    lock (mics) mics[mic.Id] = mic;
                    Say("shell: <- stream.open audio.input " + mic.Id + ": microphone on, waiting for credit");
                    var t = new Thread(() => SendMic(mic));
                    t.IsBackground = true;
                    t.Name = "mic-" + mic.Id;
                    t.Start();
                }
                return;
            }
            if (ev != null && ev.Method == Methods.StreamCredit && ev.StreamId.HasValue)
            {
                MicTx mic;
                lock (mics) mics.TryGetValue(ev.StreamId.Value, out mic);
                if (mic == null) return;
                try
                {
                    var c = FromPayload<StreamCreditParams>(ev.Payload);
                    lock (mic.Lock) { mic.Credit += c.Bytes; Monitor.PulseAll(mic.Lock); } // additive (K-10)
                }
                catch (ContractException e)
                {
                    Say("shell: ignored an invalid stream.credit: " + e.Message);
                }
                return;
            }
            if (ev != null && ev.Method == Methods.StreamClose && ev.StreamId.HasValue)
            {
                MicTx mic;
                lock (mics) mics.TryGetValue(ev.StreamId.Value, out mic);
                if (mic != null) lock (mic.Lock) { mic.Closed = true; Monitor.PulseAll(mic.Lock); }
                StreamRx st;
                lock (streams)
                {
                    if (streams.TryGetValue(ev.StreamId.Value, out st)) { st.PeerClosed = true; st.Closed = true; }
                }
                Say("shell: <- stream.close " + ev.StreamId.Value);
                return;
            }
            // Answers to the script, task and text-stream events, unknown events: logged only.
            Say("shell: <- " + Describe(m) + " trace=" + Trace(m));
        }

        /// <summary>Synthetic microphone audio for one audio.input stream, never beyond the core's credit (§8).</summary>
        void SendMic(MicTx mic)
        {
            long total = MicSeconds * 16000 * 2, sent = 0;
            ulong seq = 0;
            try
            {
                while (sent < total)
                {
                    int n;
                    lock (mic.Lock)
                    {
                        // Bounded waits: the session's end (coreDead) also stops the microphone.
                        while (mic.Credit <= 0 && !mic.Closed && !coreDead) Monitor.Wait(mic.Lock, 200);
                        if (mic.Closed || coreDead) break;
                        n = (int)Math.Min(Math.Min(MicFrameBytes, mic.Credit), total - sent);
                        mic.Credit -= n;
                    }
                    var payload = new byte[n];
                    for (int i = 0; i < n; i++) payload[i] = (byte)(((sent + i) * 7 + 3) & 0xFF);
                    lock (dataWriteLock)
                    {
                        dataFraming.WriteFrame(data, new ulong[] { (ulong)mic.Id, seq }, payload);
                        data.Flush();
                    }
                    seq++;
                    sent += n;
                }
            }
            catch (Exception e)
            {
                if (!(e is ObjectDisposedException)) Say("shell: microphone stream " + mic.Id + ": " + e.Message);
            }
            Say("shell: microphone stream " + mic.Id + ": sent " + sent + " bytes in " + seq + " frames");
        }

        static void StartThread(ThreadStart body, string name)
        {
            var t = new Thread(body);
            t.IsBackground = true;
            t.Name = name;
            t.Start();
        }

        bool Hello()
        {
            Say("step hello");
            var p = new HelloParams(
                // [1, 2]: a shell keeps the previous version one release (ADR 0004); the core picks the highest common (§15 3a).
                protocolVersions: new List<long> { 1, 2 },
                shellVersion: "4.0.0-ref",
                // Serving, the shell also sends microphone audio when the core opens an audio.input stream.
                capabilities: serving ? new List<string> { "audio.input", "audio.output", "permissions" }
                                      : new List<string> { "audio.output", "permissions" },
                locale: "ru");
            string trace = NewTrace("hello");
            var req = Request(Methods.Hello, trace, ToPayload(p));
            var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
            while (true)
            {
                var m = Next(deadline);
                if (m == null)
                {
                    if (serving) Say("shell: hello: no answer within 10 s"); else Check(false, "hello: no answer within 10 s");
                    return false;
                }
                var r = m as ResponseMessage;
                var er = m as ErrorMessage;
                if (er != null && er.CorrelationId == req.Id)
                {
                    // Serving, a refusal (protocol.incompatible) ends the session: the shell closes rather than go on (K-16).
                    if (serving) Say("shell: hello refused: " + er.Payload.Code + ": " + er.Payload.Message);
                    else Check(false, "hello refused: " + er.Payload.Code + ": " + er.Payload.Message);
                    return false;
                }
                var early = m as RequestMessage;
                if (early != null)
                {
                    // The session machine allows the core no request before the handshake (§4).
                    var d = new ErrorDetails(method: early.Method);
                    ErrorReply(Codes.ErrorCode.ProtocolNotReady, "Рукопожатие ещё не выполнено.", early.TraceId, early.Id, d);
                    if (serving) Say("shell: <- " + Describe(m) + " before the handshake: protocol.not_ready");
                    else Unexpected(m, "hello");
                    continue;
                }
                if (r == null || r.CorrelationId != req.Id)
                {
                    Unexpected(m, "hello");
                    continue;
                }
                CheckTrace(r, trace, "hello");
                Check(r.V == 1, "hello response carries v = 1 (K-7)");
                var res = Result<HelloResult>(r, "hello");
                if (res == null) return false;
                long best = 0;
                foreach (var v in res.ProtocolVersions) if (p.ProtocolVersions.Contains(v) && v > best) best = v;
                Check(best > 0 && res.ProtocolVersion == best, "hello: protocol_version " + res.ProtocolVersion + " is the highest common of shell [1, 2] and core [" + string.Join(", ", res.ProtocolVersions) + "]");
                coreCaps = res.Capabilities;
                Check(!coreCaps.Contains("actuation"), "hello: a 4.0 core does not declare actuation (§12)");
                if (!serving) Check(coreCaps.Contains("llm") && coreCaps.Contains("tts"), "hello: core declares llm and tts, which the script uses (got " + string.Join(", ", coreCaps) + ")");
                Check(!string.IsNullOrEmpty(res.SessionId), "hello: session_id " + res.SessionId);
                version = res.ProtocolVersion;
                ready = true;
                return true;
            }
        }

        void StreamedAnswer()
        {
            Say("step streamed answer");
            if (!coreCaps.Contains("llm")) { Check(false, "stream: core lacks llm; a side does not call what the peer did not declare"); return; }
            var p = new CommandHandleParams(text: "Какая столица Австралии? Расскажи.", source: CommandSource.Typed);
            string trace = NewTrace("stream");
            var req = Request(Methods.CommandHandle, trace, ToPayload(p));
            long? sid = null;
            // Chunks may arrive before the response that opens the stream (§7): keep them by stream id.
            var chunks = new Dictionary<long, StringBuilder>();
            var ended = new Dictionary<long, string>();
            var deadline = DateTime.UtcNow + StepDeadline;
            while (!(sid.HasValue && ended.ContainsKey(sid.Value)))
            {
                var m = Next(deadline);
                if (m == null) { Check(false, "stream: did not end within the deadline"); return; }
                CheckTrace(m, trace, "stream");
                var r = m as ResponseMessage;
                var ev = m as EventMessage;
                if (r != null && r.CorrelationId == req.Id)
                {
                    var res = Result<CommandHandleResult>(r, "stream");
                    if (res == null || !res.StreamId.HasValue) { Check(false, "stream: response opens no stream"); return; }
                    sid = res.StreamId;
                    Say("shell: <- response opens text stream " + sid);
                }
                else if (ev != null && ev.Method == Methods.StreamChunk && ev.StreamId.HasValue)
                {
                    if (!chunks.ContainsKey(ev.StreamId.Value)) chunks[ev.StreamId.Value] = new StringBuilder();
                    chunks[ev.StreamId.Value].Append(FromPayload<StreamChunk>(ev.Payload).Text);
                }
                else if (ev != null && ev.Method == Methods.StreamEnd && ev.StreamId.HasValue)
                {
                    ended[ev.StreamId.Value] = FromPayload<StreamEnd>(ev.Payload).Reason.ToWire();
                }
                else Unexpected(m, "stream");
            }
            string text = chunks.ContainsKey(sid.Value) ? chunks[sid.Value].ToString() : "";
            Say("shell: streamed text: " + text);
            Check(text == StreamText, "stream: chunks of stream " + sid + " spell the scripted answer");
            Check(ended[sid.Value] == "done", "stream: stream.end reason done");
        }

        void PlainCommand()
        {
            bool broken = breakRule == "trace-id";
            Say("step plain command" + (broken ? " (--break trace-id: this request goes out WITHOUT trace_id)" : ""));
            var p = new CommandHandleParams(text: "запусти телеграм", source: CommandSource.Voice, requireWake: false);
            string trace = NewTrace("launch");
            pendingIndexTrace = null;
            var req = Request(Methods.CommandHandle, trace, ToPayload(p), broken);
            var deadline = DateTime.UtcNow + StepDeadline;
            while (true)
            {
                var m = Next(deadline);
                if (m == null) { Check(false, "command: no answer within the deadline"); return; }
                var r = m as ResponseMessage;
                var er = m as ErrorMessage;
                if (broken && er != null && er.CorrelationId == req.Id)
                {
                    bool named = er.Payload.Details != null && er.Payload.Details.Fields != null && er.Payload.Details.Fields.Contains("trace_id");
                    Say("shell: BREAK trace-id: core answered " + er.Payload.Code + (named ? " naming trace_id" : "") + " (expected: the request broke K-4)");
                    return;
                }
                if (er != null && er.CorrelationId == req.Id) { Check(false, "command: error " + er.Payload.Code + ": " + er.Payload.Message); return; }
                if (r == null || r.CorrelationId != req.Id) { Unexpected(m, "command"); continue; }
                if (!broken) CheckTrace(r, trace, "command");
                var res = Result<CommandHandleResult>(r, "command");
                if (res == null) return;
                Say("shell: <- " + res.Text);
                Check(res.Text == "Запускаю Telegram.", "command: plain answer text");
                if (!broken) Check(pendingIndexTrace == trace, "command: the core's programs.index request carried the command's trace_id");
                return;
            }
        }

        void Speech()
        {
            Say("step credit-controlled audio stream");
            if (!coreCaps.Contains("tts")) { Check(false, "speech: core lacks tts"); return; }
            var p = new CommandHandleParams(text: "скажи привет", source: CommandSource.Typed);
            string trace = NewTrace("speech");
            var req = Request(Methods.CommandHandle, trace, ToPayload(p));
            StreamRx s = null;
            bool answered = false, coreClosed = false, granted = false;
            DateTime openedAt = DateTime.MinValue;
            var deadline = DateTime.UtcNow + StepDeadline;
            while (true)
            {
                if (s != null && answered && !granted && DateTime.UtcNow - openedAt >= TimeSpan.FromMilliseconds(300))
                {
                    // Initial credit is 0 (§8): 300 ms without credit, then the first grant.
                    Check(s.Received == 0 && !s.Overrun, "speech: no data before the first stream.credit");
                    Say("shell: -> stream.credit " + InitialGrant + " on stream " + s.Id);
                    Grant(s, InitialGrant);
                    granted = true;
                }
                if (s != null && (s.Closed || coreClosed) && (s.Overrun || s.Consumed >= SpeechBytes)) break;
                if (s != null && coreClosed && DateTime.UtcNow > deadline) break;
                var wait = s != null && answered && !granted ? DateTime.UtcNow + TimeSpan.FromMilliseconds(50) : deadline;
                if (coreClosed) wait = DateTime.UtcNow + TimeSpan.FromMilliseconds(100);
                var m = Next(wait < deadline ? wait : deadline);
                if (m == null)
                {
                    if (DateTime.UtcNow >= deadline) { Check(false, "speech: stream did not finish within the deadline"); break; }
                    continue;
                }
                CheckTrace(m, trace, "speech");
                var r = m as ResponseMessage;
                var ev = m as EventMessage;
                var er = m as ErrorMessage;
                if (r != null && r.CorrelationId == req.Id)
                {
                    answered = true;
                }
                else if (er != null && er.CorrelationId == req.Id)
                {
                    Check(false, "speech: error " + er.Payload.Code);
                    return;
                }
                else if (ev != null && ev.Method == Methods.StreamOpen)
                {
                    var op = FromPayload<StreamOpenParams>(ev.Payload);
                    Check(op.Kind == StreamKind.AudioOutput && op.Format.Encoding == "pcm_s16le", "speech: stream.open audio.output pcm_s16le, stream " + op.StreamId);
                    s = new StreamRx();
                    s.Id = op.StreamId;
                    s.Trace = trace;
                    s.Granted = Limits.InitialCreditBytes;
                    lock (streams) streams[s.Id] = s;
                    openedAt = DateTime.UtcNow;
                }
                else if (ev != null && ev.Method == Methods.StreamClose && s != null && ev.StreamId == s.Id)
                {
                    coreClosed = true;
                    s.PeerClosed = true;
                    deadline = DateTime.UtcNow + TimeSpan.FromSeconds(2); // frames still in flight on the data channel
                }
                else Unexpected(m, "speech");
            }
            if (s == null) { Check(false, "speech: no stream.open"); return; }
            lock (streams) s.Closed = true;
            Say("shell: stream " + s.Id + ": " + s.Consumed + " bytes played in " + s.NextSeq + " frames, " + s.Granted + " bytes of credit granted");
            Check(!s.Overrun, "speech: the core never exceeded the granted credit (§8, §15 item 5)");
            Check(s.Consumed == SpeechBytes, "speech: all " + SpeechBytes + " bytes arrived (got " + s.Consumed + ")");
            Check(s.PatternOk, "speech: audio bytes match the scripted pattern");
            Check(coreClosed, "speech: the core closed the stream with stream.close");
        }

        void Permission()
        {
            Say("step permission");
            foreach (bool allow in new[] { false, true })
            {
                var p = new CommandHandleParams(text: "выключи компьютер", source: CommandSource.Voice);
                string trace = NewTrace(allow ? "power-yes" : "power-no");
                var req = Request(Methods.CommandHandle, trace, ToPayload(p));
                var deadline = DateTime.UtcNow + StepDeadline;
                bool asked = false;
                while (true)
                {
                    var m = Next(deadline);
                    if (m == null) { Check(false, "permission: no answer within the deadline"); return; }
                    CheckTrace(m, trace, "permission");
                    var rq = m as RequestMessage;
                    var r = m as ResponseMessage;
                    var er = m as ErrorMessage;
                    if (rq != null && rq.Method == Methods.PermissionRequest)
                    {
                        var ask = FromPayload<PermissionRequestParams>(rq.Payload);
                        asked = true;
                        // The shell must show preview (§11); here "showing" is printing it.
                        Say("shell: [dialog] " + ask.Permission + "/" + ask.Action + ": " + ask.Preview + " (ttl " + ask.Ttl + " s) -> " + (allow ? "yes, once" : "no"));
                        Check(!ask.ConfirmationId.HasValue, "permission: no confirmation_id on the wire (§11)");
                        Check(!string.IsNullOrEmpty(ask.Preview) && ask.Ttl >= 1, "permission: request has a preview and a ttl");
                        var ans = new PermissionResult(requestId: ask.RequestId, granted: allow,
                                                       scope: allow ? PermissionScope.Once : (PermissionScope?)null);
                        Respond(rq, ToPayload(ans));
                    }
                    else if (r != null && r.CorrelationId == req.Id)
                    {
                        Check(allow && asked, "permission: command answered after the user said yes");
                        break;
                    }
                    else if (er != null && er.CorrelationId == req.Id)
                    {
                        Check(!allow && asked && er.Payload.Code == "permission.denied", "permission: a no gives permission.denied (got " + er.Payload.Code + ")");
                        break;
                    }
                    else Unexpected(m, "permission");
                }
            }
        }

        string StartTask(string text, string trace)
        {
            var p = new CommandHandleParams(text: text, source: CommandSource.Typed);
            var req = Request(Methods.CommandHandle, trace, ToPayload(p));
            var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
            while (true)
            {
                var m = Next(deadline);
                if (m == null) { Check(false, "task: no answer to " + text); return null; }
                var r = m as ResponseMessage;
                if (r != null && r.CorrelationId == req.Id)
                {
                    var res = Result<CommandHandleResult>(r, "task");
                    if (res == null || res.TaskId == null) { Check(false, "task: response carries no task_id"); return null; }
                    CheckTrace(r, trace, "task");
                    return res.TaskId;
                }
                Unexpected(m, "task");
            }
        }

        TaskCancelResult Cancel(string taskId, string trace, out string coreMessageAfter)
        {
            coreMessageAfter = null;
            var p = new TaskCancelParams(taskId: taskId);
            var req = Request(Methods.TaskCancel, trace, ToPayload(p));
            var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
            while (true)
            {
                var m = Next(deadline);
                if (m == null) { Check(false, "task.cancel " + taskId + ": no receipt"); return null; }
                var r = m as ResponseMessage;
                if (r != null && r.CorrelationId == req.Id)
                {
                    CheckTrace(r, trace, "task.cancel");
                    return Result<TaskCancelResult>(r, "task.cancel");
                }
                var ev = m as EventMessage;
                // Progress already in flight before the cancel is fine.
                if (ev != null && (ev.Method == Methods.TaskProgress || ev.Method == Methods.TaskPartial)) continue;
                Unexpected(m, "task.cancel");
            }
        }

        /// <summary>Task events until <paramref name="until"/> says stop or the deadline; counts per kind.</summary>
        Dictionary<string, int> TaskEvents(string taskId, string trace, DateTime deadline, Func<Dictionary<string, int>, bool> until)
        {
            var n = new Dictionary<string, int> { { "task.progress", 0 }, { "task.partial", 0 }, { "task.done", 0 }, { "task.failed", 0 }, { "task.cancelled", 0 } };
            while (!until(n))
            {
                var m = Next(deadline);
                if (m == null) break;
                var ev = m as EventMessage;
                if (ev == null || !n.ContainsKey(ev.Method)) { Unexpected(m, "task " + taskId); continue; }
                string tid = null;
                JsonElement t;
                if (ev.Payload.TryGetValue("task_id", out t) && t.ValueKind == JsonValueKind.String) tid = t.GetString();
                if (tid != taskId) { Unexpected(m, "task " + taskId); continue; }
                switch (ev.Method)
                {
                    case "task.progress": FromPayload<TaskProgress>(ev.Payload); break;
                    case "task.partial": FromPayload<TaskPartial>(ev.Payload); break;
                    case "task.done": FromPayload<TaskDone>(ev.Payload); break;
                    case "task.failed": FromPayload<TaskFailed>(ev.Payload); break;
                    case "task.cancelled": FromPayload<TaskCancelled>(ev.Payload); break;
                }
                CheckTrace(m, trace, "task " + taskId);
                n[ev.Method]++;
            }
            return n;
        }

        static int Finals(Dictionary<string, int> n) { return n["task.done"] + n["task.failed"] + n["task.cancelled"]; }

        void Tasks()
        {
            Say("step long tasks");
            string after;
            // A short task runs to done; a later cancel is refused and yields no task.cancelled (§15 item 8).
            string trace = NewTrace("short");
            string tid = StartTask("короткая задача", trace);
            if (tid != null)
            {
                var n = TaskEvents(tid, trace, DateTime.UtcNow + TimeSpan.FromSeconds(10), c => Finals(c) > 0);
                Check(n["task.progress"] > 0 && n["task.partial"] > 0 && n["task.done"] == 1 && Finals(n) == 1,
                      "task " + tid + ": progress x" + n["task.progress"] + ", partial x" + n["task.partial"] + ", then exactly one final event: done");
                var res = Cancel(tid, NewTrace("cancel-done"), out after);
                Check(res != null && !res.Accepted && res.Status == TaskCancelStatus.Done, "task.cancel on a finished task: accepted false, status done");
                var late = TaskEvents(tid, trace, DateTime.UtcNow + TimeSpan.FromMilliseconds(500), c => false);
                Check(Finals(late) == 0, "finished task: no task.cancelled after the refused cancel");
            }
            // Unknown task.
            var unk = Cancel("task-nope", NewTrace("cancel-unknown"), out after);
            Check(unk != null && !unk.Accepted && unk.Status == TaskCancelStatus.Unknown, "task.cancel on an unknown task: accepted false, status unknown");
            // The long (60-second) stub, cancelled while it runs.
            trace = NewTrace("long");
            tid = StartTask("долгая задача", trace);
            if (tid == null) return;
            var seen = TaskEvents(tid, trace, DateTime.UtcNow + TimeSpan.FromSeconds(5), c => c["task.progress"] > 0 && c["task.partial"] > 0);
            Check(seen["task.progress"] > 0 && seen["task.partial"] > 0 && Finals(seen) == 0, "task " + tid + ": running with progress and partial results");
            var rc = Cancel(tid, NewTrace("cancel-long"), out after);
            Check(rc != null && rc.Accepted && rc.Status == TaskCancelStatus.Running, "task.cancel on a running task: receipt accepted true, status running");
            var fin = TaskEvents(tid, trace, DateTime.UtcNow + TimeSpan.FromSeconds(5), c => Finals(c) > 0);
            Check(fin["task.cancelled"] == 1 && Finals(fin) == 1, "task " + tid + ": task.cancelled follows the receipt, carrying the task's trace_id");
            var tail = TaskEvents(tid, trace, DateTime.UtcNow + TimeSpan.FromMilliseconds(700), c => false);
            Check(Finals(tail) == 0 && tail["task.progress"] == 0, "task " + tid + ": nothing after its one final event");
        }

        void Heartbeat()
        {
            Say("step heartbeat (about 11 s of silence)");
            // The shell's last message goes out before the core's last one (a short task keeps the
            // core talking ~0.6 s longer), so the core's silence counter expires first: it pings.
            int answered0 = corePingsAnswered, pongs0 = pongsReceived;
            string trace = NewTrace("short-hb");
            string tid = StartTask("короткая задача", trace);
            if (tid != null) TaskEvents(tid, trace, DateTime.UtcNow + TimeSpan.FromSeconds(10), c => Finals(c) > 0);
            // Answering that ping 0.5 s late (well within pingAnswerSeconds) restarts the core's
            // counter after the shell's, so the shell's own ping comes next.
            pongDelayMs = 500;
            var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(25);
            while (DateTime.UtcNow < deadline && !(corePingsAnswered > answered0 && pongsReceived > pongs0))
            {
                var m = Next(DateTime.UtcNow + TimeSpan.FromMilliseconds(200));
                if (m != null) Unexpected(m, "heartbeat");
                if (coreDead) break;
            }
            pongDelayMs = 0;
            long quiet = Interlocked.Read(ref lastCorePingAfterShellTxMs);
            Check(corePingsAnswered > answered0, "heartbeat: the core pinged the silent shell and got a pong (correlation_id = the ping's id)");
            Check(quiet < 0 || quiet >= (long)Limits.HeartbeatSilenceSeconds.TotalMilliseconds - 250, "heartbeat: the core pinged only after > " + Limits.HeartbeatSilenceSeconds.TotalSeconds + " s of silence (" + quiet + " ms)");
            Check(pongsReceived > pongs0, "heartbeat: the core answered the shell's ping with a pong");
            Check(!coreDead, "heartbeat: the core stayed alive");
        }
    }
}
