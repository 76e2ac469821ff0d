// Hand-written test runner for the generated C# SDK (C# 7.3 syntax, builds with Mono mcs).
// Usage: dotnet tests.dll VECTORS_DIR
//   VECTORS_DIR/<module>/valid.json and invalid.json as written by `contractgen vectors` (docs/vectors.md).
// Prints one line per failure and, last, exactly "N passed, N failed"; exits 1 on any failure.
// The wire-rule tests (JSON rules, method caps, frame deadline) are in WireTests.cs.
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Text;
using System.Text.Json;
using Contract.Runtime;

public static partial class Tests
{
    static int passed;
    static int failed;

    static void Pass() { passed++; }

    static void Fail(string id, string why)
    {
        failed++;
        Console.WriteLine("FAIL " + id + ": " + why);
    }

    static void Expect(bool ok, string id, string why)
    {
        if (ok) Pass(); else Fail(id, why);
    }

    static Exception Unwrap(Exception e)
    {
        while (e is TargetInvocationException && e.InnerException != null) e = e.InnerException;
        return e;
    }

    static string Pascal(string module)
    {
        var sb = new StringBuilder();
        foreach (var w in module.Split('_', '-'))
        {
            if (w.Length == 0) continue;
            sb.Append(char.ToUpperInvariant(w[0])).Append(w.Substring(1).ToLowerInvariant());
        }
        return sb.ToString();
    }

    // The generated modules are compiled into this runner; the runtime is its own assembly
    // (Contract.Runtime.dll, as an SDK's users reference it).
    static Assembly Sdk { get { return typeof(Tests).Assembly; } }

    static System.Type SdkType(string name)
    {
        return Sdk.GetType(name, false);
    }

    static Dictionary<string, System.Type> TypesOf(string module)
    {
        string ns = "Contract.Sdk." + Pascal(module);
        var contract = SdkType(ns + "." + Pascal(module) + "Contract");
        if (contract == null) return null;
        return (Dictionary<string, System.Type>)contract.GetField("Types").GetValue(null);
    }

    // ------------------------------------------------------------------ vectors

    static void RoundTrip(string id, JsonElement value, string typeName, Dictionary<string, System.Type> types)
    {
        System.Type t;
        if (!types.TryGetValue(typeName, out t))
        {
            Fail(id, "no C# type for " + typeName);
            return;
        }
        string text = value.GetRawText();
        try
        {
            object decoded = Codec.Decode(text, t);
            string again = Codec.Encode(decoded, t);
            using (var doc = JsonDocument.Parse(again))
            {
                if (Json.SemanticEquals(value, doc.RootElement)) Pass();
                else Fail(id, typeName + " re-encodes differently:\n  in:  " + text + "\n  out: " + again);
            }
            Rebuilds(id, decoded, again);
        }
        catch (Exception e)
        {
            e = Unwrap(e);
            Fail(id, typeName + " rejected a valid value: " + e.GetType().Name + ": " + e.Message);
        }
    }

    static void Valid(string module, string path, Dictionary<string, System.Type> types)
    {
        using (var doc = JsonDocument.Parse(File.ReadAllText(path)))
        {
            foreach (var v in doc.RootElement.EnumerateArray())
            {
                string id = module + "/" + v.GetProperty("id").GetString();
                var mt = v.GetProperty("messageType");
                if (mt.ValueKind == JsonValueKind.String) RoundTrip(id + "#message", v.GetProperty("message"), mt.GetString(), types);
                var pt = v.GetProperty("payloadType");
                if (pt.ValueKind == JsonValueKind.String) RoundTrip(id + "#payload", v.GetProperty("payload"), pt.GetString(), types);
            }
        }
    }

    static void Invalid(string module, string path, Dictionary<string, System.Type> types)
    {
        using (var doc = JsonDocument.Parse(File.ReadAllText(path)))
        {
            foreach (var v in doc.RootElement.EnumerateArray())
            {
                string id = module + "/" + v.GetProperty("id").GetString();
                string typeName = v.GetProperty("type").GetString();
                string text = v.GetProperty("text").GetString();
                string label = v.GetProperty("error").GetString();
                System.Type t;
                if (!types.TryGetValue(typeName, out t))
                {
                    Fail(id, "no C# type for " + typeName);
                    continue;
                }
                try
                {
                    object decoded = Codec.Decode(text, t);
                    Fail(id, "accepted (expected " + label + "): " + text + " -> " + Codec.Encode(decoded, t));
                }
                catch (ContractException e)
                {
                    Expect(e.Label == label, id, "rejected as " + e.Label + ", expected " + label + ": " + e.Message);
                }
                catch (Exception e)
                {
                    e = Unwrap(e);
                    Fail(id, "rejected with an unlabelled " + e.GetType().Name + ": " + e.Message);
                }
            }
        }
    }

    // ------------------------------------------------------------------ framing

    static void Throws<T>(string id, Action a) where T : Exception
    {
        try
        {
            a();
            Fail(id, "expected " + typeof(T).Name);
        }
        catch (Exception e)
        {
            e = Unwrap(e);
            Expect(e is T, id, "expected " + typeof(T).Name + ", got " + e.GetType().Name + ": " + e.Message);
        }
    }

    static List<byte[]> SamplePayloads(string module, string vectorsDir)
    {
        var outList = new List<byte[]>();
        string path = Path.Combine(vectorsDir, module, "valid.json");
        if (File.Exists(path))
        {
            using (var doc = JsonDocument.Parse(File.ReadAllText(path)))
            {
                foreach (var v in doc.RootElement.EnumerateArray())
                {
                    outList.Add(Encoding.UTF8.GetBytes(JsonSerializer.Serialize(v.GetProperty("message"))));
                    if (outList.Count == 5) break;
                }
            }
        }
        outList.Add(Encoding.UTF8.GetBytes("{\"text\":\"\u043f\u0440\u0438\u0432\u0435\u0442 \ud83d\ude00\"}"));
        outList.Add(new byte[0]);
        return outList;
    }

    static void Framing(string module, string vectorsDir)
    {
        var channels = SdkType("Contract.Sdk." + Pascal(module) + ".Channels");
        if (channels == null)
        {
            Fail(module + "/framing", "no Channels class");
            return;
        }
        var samples = SamplePayloads(module, vectorsDir);
        foreach (var m in channels.GetMethods(BindingFlags.Public | BindingFlags.Static))
        {
            if (!m.Name.EndsWith("Framing") || m.GetParameters().Length != 0) continue;
            string id = module + "/framing/" + m.Name;
            object framing = m.Invoke(null, null);
            var lp = framing as LengthPrefixedFraming;
            var nd = framing as NdjsonFraming;
            var bin = framing as BinaryFraming;
            var msg = framing as MessageFraming;
            if (lp != null) LengthPrefixed(id, lp, samples);
            else if (nd != null) Ndjson(id, nd, samples);
            else if (bin != null) Binary(id, bin, samples);
            else if (msg != null)
            {
                Throws<FrameTooLargeException>(id + "/oversize", delegate { msg.CheckSize(msg.Cap + 1); });
                try { msg.CheckSize(msg.Cap); Pass(); } catch (Exception e) { Fail(id + "/at-cap", e.Message); }
            }
            else Fail(id, "unknown framing " + framing);
        }
    }

    static void LengthPrefixed(string id, LengthPrefixedFraming f, List<byte[]> samples)
    {
        // Round trip, with reads that return one byte at a time (frames split across reads).
        var ms = new MemoryStream();
        foreach (var p in samples) f.WriteFrame(ms, p);
        var reader = new TrickleStream(ms.ToArray());
        bool ok = true;
        foreach (var p in samples)
        {
            var got = f.ReadFrame(reader);
            if (got == null || !got.SequenceEqual(p)) ok = false;
        }
        Expect(ok && f.ReadFrame(reader) == null, id + "/round-trip", "frames differ after a round trip");

        // A 0xFFFFFFFF prefix is refused before the payload buffer exists.
        ExpectOversizePrefixRefused(id, f.LengthBytes, delegate(Stream st) { f.ReadFrame(st); });

        // The cap itself: a frame of exactly the cap passes, one byte more is refused on both sides.
        var atCap = new byte[f.Cap];
        var ms2 = new MemoryStream();
        f.WriteFrame(ms2, atCap);
        ms2.Position = 0;
        var back = f.ReadFrame(ms2);
        Expect(back != null && back.Length == atCap.Length, id + "/at-cap", "a frame of exactly the cap did not round-trip");
        Throws<FrameTooLargeException>(id + "/write-oversize", delegate { f.WriteFrame(new MemoryStream(), new byte[f.Cap + 1]); });

        // A truncated payload is an error, not a short frame.
        var ms3 = new MemoryStream();
        f.WriteFrame(ms3, samples[0]);
        var cut = ms3.ToArray().Take((int)ms3.Length - 1).ToArray();
        Throws<EndOfStreamException>(id + "/truncated", delegate { f.ReadFrame(new MemoryStream(cut)); });
    }

    static void Ndjson(string id, NdjsonFraming f, List<byte[]> samples)
    {
        var ms = new MemoryStream();
        var lines = samples.Where(p => p.Length > 0).Select(p => Encoding.UTF8.GetString(p)).ToList();
        foreach (var l in lines) f.WriteLine(ms, l);
        var reader = new TrickleStream(ms.ToArray());
        bool ok = true;
        foreach (var l in lines)
        {
            if (f.ReadLine(reader) != l) ok = false;
        }
        Expect(ok && f.ReadLine(reader) == null, id + "/round-trip", "lines differ after a round trip");

        // An endless line is refused once it passes the cap, without reading it all.
        var endless = new EndlessStream((byte)'a');
        Throws<FrameTooLargeException>(id + "/oversize", delegate { f.ReadLine(endless); });
        Expect(endless.Served <= f.Cap * 3 + 2, id + "/oversize-bounded", "read " + endless.Served + " bytes of an endless line");

        string atCap = new string('x', (int)f.Cap);
        var ms2 = new MemoryStream();
        f.WriteLine(ms2, atCap);
        ms2.Position = 0;
        Expect(f.ReadLine(ms2) == atCap, id + "/at-cap", "a line of exactly the cap did not round-trip");
        Throws<FrameTooLargeException>(id + "/write-oversize", delegate { f.WriteLine(new MemoryStream(), atCap + "x"); });
        if (f.Utf16Units)
        {
            // Cyrillic letters are 2 UTF-8 bytes but 1 UTF-16 unit: a line of cap letters is within the cap.
            string cyr = new string('\u0436', (int)f.Cap);
            var ms3 = new MemoryStream();
            f.WriteLine(ms3, cyr);
            ms3.Position = 0;
            Expect(f.ReadLine(ms3) == cyr, id + "/utf16-measure", "a line of cap UTF-16 units (2x bytes) was refused");
        }
        Throws<ArgumentException>(id + "/newline-in-line", delegate { f.WriteLine(new MemoryStream(), "{}\n{}"); });
    }

    static void Binary(string id, BinaryFraming f, List<byte[]> samples)
    {
        int extra = f.FieldBytes.Length - 1;
        var ms = new MemoryStream();
        ulong n = 0;
        foreach (var p in samples)
        {
            var fields = new ulong[extra];
            for (int i = 0; i < extra; i++) fields[i] = n + (ulong)i;
            f.WriteFrame(ms, fields, p);
            n++;
        }
        var reader = new TrickleStream(ms.ToArray());
        bool ok = true;
        n = 0;
        foreach (var p in samples)
        {
            var fr = f.ReadFrame(reader);
            if (fr == null || !fr.Payload.SequenceEqual(p)) ok = false;
            else for (int i = 0; i < extra; i++) if (fr.Header[i + 1] != n + (ulong)i) ok = false;
            n++;
        }
        Expect(ok && f.ReadFrame(reader) == null, id + "/round-trip", "binary frames differ after a round trip");
        ExpectOversizePrefixRefused(id, f.FieldBytes[0], delegate(Stream st) { f.ReadFrame(st); });
    }

    /// <summary>A length field of all 0xFF bytes is refused before a payload buffer is allocated.</summary>
    static void ExpectOversizePrefixRefused(string id, int width, Action<Stream> read)
    {
        var huge = new byte[width];
        for (int i = 0; i < huge.Length; i++) huge[i] = 0xFF;
        long before = GC.GetAllocatedBytesForCurrentThread();
        try
        {
            read(new MemoryStream(huge));
            Fail(id + "/oversize-prefix", "accepted a 0xFF.. length");
        }
        catch (FrameTooLargeException)
        {
            long allocated = GC.GetAllocatedBytesForCurrentThread() - before;
            Expect(allocated < 64 * 1024, id + "/oversize-prefix", "allocated " + allocated + " bytes before refusing");
        }
        catch (Exception e)
        {
            Fail(id + "/oversize-prefix", e.GetType().Name + ": " + e.Message);
        }
    }

    /// <summary>Serves its bytes one at a time, so frames split across reads.</summary>
    sealed class TrickleStream : MemoryStream
    {
        public TrickleStream(byte[] b) : base(b) { }
        public override int Read(byte[] buffer, int offset, int count) { return base.Read(buffer, offset, Math.Min(count, 1)); }
    }

    /// <summary>An endless run of one byte.</summary>
    sealed class EndlessStream : Stream
    {
        readonly byte b;
        public long Served;
        public EndlessStream(byte b) { this.b = b; }
        public override bool CanRead { get { return true; } }
        public override bool CanSeek { get { return false; } }
        public override bool CanWrite { get { return false; } }
        public override long Length { get { throw new NotSupportedException(); } }
        public override long Position { get { return Served; } set { throw new NotSupportedException(); } }
        public override void Flush() { }
        public override int Read(byte[] buffer, int offset, int count)
        {
            for (int i = 0; i < count; i++) buffer[offset + i] = b;
            Served += count;
            return count;
        }
        public override long Seek(long offset, SeekOrigin origin) { throw new NotSupportedException(); }
        public override void SetLength(long value) { throw new NotSupportedException(); }
        public override void Write(byte[] buffer, int offset, int count) { throw new NotSupportedException(); }
    }

    // ------------------------------------------------------------------ enums, codes, constants, machines

    static void Enums(string module, Dictionary<string, System.Type> types)
    {
        var enums = new List<System.Type>();
        foreach (var t in types.Values) if (t.IsEnum) enums.Add(t);
        var codes = SdkType("Contract.Sdk." + Pascal(module) + ".Codes");
        if (codes != null) enums.AddRange(codes.GetNestedTypes().Where(t => t.IsEnum));
        foreach (var t in enums.Distinct())
        {
            string id = module + "/enum/" + t.Name;
            bool ok = true;
            string why = "";
            foreach (var v in Enum.GetValues(t))
            {
                try
                {
                    string wire = Codec.Encode(v, t);
                    object back = Codec.Decode(wire, t);
                    if (!back.Equals(v)) { ok = false; why += v + " -> " + wire + " -> " + back + "; "; }
                }
                catch (Exception e) { ok = false; why += v + ": " + Unwrap(e).Message + "; "; }
            }
            Expect(ok, id + "/round-trip", why);
            try
            {
                Codec.Decode("\"zz-not-a-value\"", t);
                Fail(id + "/unknown", "accepted an unknown value");
            }
            catch (ContractException e)
            {
                Expect(e.Label == Labels.BadEnum || e.Label == Labels.WrongType, id + "/unknown", "labelled " + e.Label);
            }
            // Optional enum members are Nullable<T>: the converter must apply there too.
            var nt = typeof(Nullable<>).MakeGenericType(t);
            var first = Enum.GetValues(t).GetValue(0);
            try
            {
                string wire = Codec.Encode(first, t);
                Expect(Codec.Encode(Codec.Decode(wire, nt), nt) == wire, id + "/nullable", "nullable round trip differs");
            }
            catch (Exception e) { Fail(id + "/nullable", Unwrap(e).Message); }
        }
    }

    static object Call(System.Type t, string method, params object[] args)
    {
        var ms = t.GetMethods(BindingFlags.Public | BindingFlags.Static).Where(m => m.Name == method && m.GetParameters().Length == args.Length
            && (args.Length == 0 || m.GetParameters()[0].ParameterType == args[0].GetType())).ToList();
        if (ms.Count == 0) throw new MissingMethodException(t.Name, method);
        return ms[0].Invoke(null, args);
    }

    static void Machines(string module)
    {
        string ns = "Contract.Sdk." + Pascal(module) + ".";
        foreach (var m in Sdk.GetTypes().Where(t => t.Namespace == "Contract.Sdk." + Pascal(module) && t.Name.EndsWith("Machine") && t.IsAbstract && t.IsSealed))
        {
            var e = SdkType(ns + m.Name.Substring(0, m.Name.Length - "Machine".Length));
            string id = module + "/machine/" + e.Name;
            bool ignore = (bool)m.GetField("IgnoreInvalid").GetValue(null);
            object initial = m.GetField("Initial").GetValue(null);
            Expect(!(bool)Call(m, "IsTerminal", initial), id + "/initial", "initial state is terminal");
            bool ok = true;
            string why = "";
            int allowed = 0;
            foreach (var a in Enum.GetValues(e))
            {
                foreach (var b in Enum.GetValues(e))
                {
                    bool can = (bool)Call(m, "CanTransition", a, b);
                    if (can) allowed++;
                    if (can && (bool)Call(m, "IsTerminal", a)) { ok = false; why += "terminal " + a + " -> " + b + "; "; }
                    try
                    {
                        object r = Call(m, "Transition", a, b);
                        if (can && !r.Equals(b)) { ok = false; why += a + "->" + b + " gave " + r + "; "; }
                        if (!can && !ignore) { ok = false; why += a + "->" + b + " allowed; "; }
                        if (!can && ignore && !r.Equals(a)) { ok = false; why += a + "->" + b + " not ignored; "; }
                    }
                    catch (Exception ex)
                    {
                        ex = Unwrap(ex);
                        if (can || ignore || !(ex is InvalidTransitionException)) { ok = false; why += a + "->" + b + " threw " + ex.Message + "; "; }
                    }
                }
            }
            Expect(ok && allowed > 0, id + "/transitions", why + (allowed == 0 ? "no transitions" : ""));
        }
    }

    // Machine vectors (machines.json): each typed machine steps on its messages and events as
    // `contractgen vectors` says, which is what the proxy's policy engine rules.
    static void MachineVectors(string module, string path)
    {
        var byKey = new Dictionary<string, System.Type>();
        foreach (var m in Sdk.GetTypes().Where(t => t.Namespace == "Contract.Sdk." + Pascal(module) && t.Name.EndsWith("Machine") && t.IsAbstract && t.IsSealed))
        {
            if (m.GetMethod("OnMessage") != null) byKey[(string)m.GetField("MachineKey").GetValue(null)] = m;
        }
        using (var doc = JsonDocument.Parse(File.ReadAllText(path)))
        {
            var keys = new List<string>();
            foreach (var v in doc.RootElement.GetProperty("messages").EnumerateArray())
            {
                string id = module + "/machine-message/" + v.GetProperty("id").GetString();
                System.Type m;
                if (!byKey.TryGetValue(v.GetProperty("machine").GetString(), out m)) { Fail(id, "no typed machine class"); continue; }
                keys.Add(v.GetProperty("machine").GetString());
                object state = Call(m, "FromWire", v.GetProperty("state").GetString());
                var method = v.GetProperty("method");
                object got = m.GetMethod("OnMessage").Invoke(null, new object[] {
                    state, v.GetProperty("from").GetString(), v.GetProperty("kind").GetString(),
                    method.ValueKind == JsonValueKind.Null ? null : method.GetString(), v.GetProperty("message") });
                var gt = got.GetType();
                string step = (string)gt.GetProperty("Step").GetValue(got);
                string expect = v.GetProperty("expect").GetString();
                bool ok = step == expect;
                string why = "got " + step + ", want " + expect;
                if (ok && expect == "moved")
                {
                    object to = Call(m, "FromWire", v.GetProperty("to").GetString());
                    object ev = Call(m, "EventFromLabel", v.GetProperty("event").GetString());
                    ok = gt.GetProperty("To").GetValue(got).Equals(to) && gt.GetProperty("Event").GetValue(got).Equals(ev);
                    why = "moved to " + gt.GetProperty("To").GetValue(got) + " on " + gt.GetProperty("Event").GetValue(got);
                }
                if (ok && expect == "out-of-place")
                {
                    ok = (bool)gt.GetProperty("Ignorable").GetValue(got) == v.GetProperty("ignorable").GetBoolean();
                    why = "ignorable differs";
                }
                Expect(ok, id, why);
            }
            foreach (var v in doc.RootElement.GetProperty("events").EnumerateArray())
            {
                string id = module + "/machine-event/" + v.GetProperty("id").GetString();
                System.Type m;
                if (!byKey.TryGetValue(v.GetProperty("machine").GetString(), out m)) { Fail(id, "no typed machine class"); continue; }
                keys.Add(v.GetProperty("machine").GetString());
                object state = Call(m, "FromWire", v.GetProperty("state").GetString());
                object ev = Call(m, "EventFromLabel", v.GetProperty("event").GetString());
                var to = v.GetProperty("to");
                try
                {
                    object got = Call(m, "On", state, ev);
                    Expect(to.ValueKind != JsonValueKind.Null && got.Equals(Call(m, "FromWire", to.GetString())), id, "moved to " + got);
                }
                catch (Exception ex)
                {
                    var e = Unwrap(ex) as InvalidEventException;
                    Expect(to.ValueKind == JsonValueKind.Null && e != null && e.Ignorable == v.GetProperty("ignorable").GetBoolean(), id, "threw " + Unwrap(ex).Message);
                }
            }
            // A typed machine without vectors would pass the checks above vacuously.
            keys = keys.Distinct().OrderBy(k => k).ToList();
            Expect(keys.SequenceEqual(byKey.Keys.OrderBy(k => k)), module + "/machine-vectors", "vectors cover " + string.Join(",", keys) + "; typed machines " + string.Join(",", byKey.Keys));
        }
    }

    // Rule vectors (rules.json): request ids are issued and checked, and keyed rate limits
    // admit and refuse, as `contractgen vectors` says (what the proxy's policy engine runs).
    static void RuleVectors(string module, string path)
    {
        var rules = SdkType("Contract.Sdk." + Pascal(module) + ".Rules");
        if (rules == null) { Fail(module + "/rules", "no Rules class"); return; }
        var byParty = (Dictionary<string, IdRules>)rules.GetField("IdRulesByParty").GetValue(null);
        var limiters = (Dictionary<string, Func<KeyedRate>>)rules.GetField("RateLimiters").GetValue(null);
        using (var doc = JsonDocument.Parse(File.ReadAllText(path)))
        {
            var parties = new List<string>();
            foreach (var v in doc.RootElement.GetProperty("ids").EnumerateArray())
            {
                string party = v.GetProperty("party").GetString();
                string id = module + "/ids/" + party;
                parties.Add(party);
                IdRules r;
                if (!byParty.TryGetValue(party, out r)) { Fail(id, "no id rules"); continue; }
                var issuer = new IdCounter();
                foreach (var want in v.GetProperty("next").EnumerateArray())
                {
                    object got = issuer.NextId(r);
                    string text = got is string ? JsonSerializer.Serialize((string)got) : Convert.ToString(got, System.Globalization.CultureInfo.InvariantCulture);
                    Expect(text == want.GetRawText(), id + "/next", "issued " + text + ", want " + want.GetRawText());
                }
                var checker = new IdCounter();
                foreach (var a in v.GetProperty("admit").EnumerateArray())
                {
                    string got = "ok";
                    try { checker.Admit(r, a.GetProperty("id")); }
                    catch (IdRuleException e) { got = e.Rule; }
                    Expect(got == a.GetProperty("expect").GetString(), id + "/admit/" + a.GetProperty("id").GetRawText(), "got " + got);
                }
            }
            Expect(parties.OrderBy(p => p).SequenceEqual(byParty.Keys.OrderBy(p => p)), module + "/ids", "vectors cover " + string.Join(",", parties));
            var limits = new List<string>();
            foreach (var v in doc.RootElement.GetProperty("rates").EnumerateArray())
            {
                string name = v.GetProperty("limit").GetString();
                limits.Add(name);
                Func<KeyedRate> make;
                if (!limiters.TryGetValue(name, out make)) { Fail(module + "/rates/" + name, "no limiter"); continue; }
                var limiter = make();
                int i = 0;
                foreach (var c in v.GetProperty("calls").EnumerateArray())
                {
                    string got = limiter.Take(c.GetProperty("from").GetString(), c.GetProperty("method").GetString(), c.GetProperty("message"),
                        c.GetProperty("t").GetDouble(), 0, c.GetProperty("size").GetInt64());
                    Expect(got == c.GetProperty("expect").GetString(), module + "/rates/" + name + "/" + i++, "got " + got);
                }
            }
            Expect(limits.OrderBy(p => p).SequenceEqual(limiters.Keys.OrderBy(p => p)), module + "/rates", "vectors cover " + string.Join(",", limits));
        }
    }

    static void Spot(string id, bool ok, string why) { Expect(ok, "constants/" + id, why); }

    static object Static(string type, string member)
    {
        var t = SdkType(type);
        if (t == null) return null;
        var f = t.GetField(member);
        return f == null ? null : f.GetValue(null);
    }

    static object Wire(object enumValue)
    {
        var ext = SdkType(enumValue.GetType().Namespace + ".WireNames");
        return Call(ext, "ToWire", enumValue);
    }

    static void Constants(List<string> modules)
    {
        if (modules.Contains("kernel"))
        {
            Spot("kernel/control-cap", object.Equals(Static("Contract.Sdk.Kernel.Channels", "ControlCap"), 1048576L), "ControlCap");
            Spot("kernel/limit", object.Equals(Static("Contract.Sdk.Kernel.Limits", "ControlPayloadMax"), 1048576L), "ControlPayloadMax");
            Spot("kernel/timespan", object.Equals(Static("Contract.Sdk.Kernel.Limits", "DeadAfterSilenceSeconds"), TimeSpan.FromSeconds(20)), "DeadAfterSilenceSeconds");
            var err = Enum.Parse(SdkType("Contract.Sdk.Kernel.Codes+ErrorCode"), "ProtocolNotReady");
            var ext = SdkType("Contract.Sdk.Kernel.WireNames");
            Spot("kernel/error-code", (string)Wire(err) == "protocol.not_ready", "ErrorCode wire");
            Spot("kernel/error-category", (string)Call(ext, "Category", err) == "protocol", "ErrorCode category");
            Spot("kernel/error-retryable", (bool)Call(ext, "IsRetryable", err), "ErrorCode retryable");
        }
        if (modules.Contains("rukh"))
        {
            var err = Enum.Parse(SdkType("Contract.Sdk.Rukh.Codes+ErrorCode"), "ParseError");
            Spot("rukh/error-code", object.Equals(Wire(err), -32700L), "ParseError = -32700");
            Spot("rukh/frame-cap", object.Equals(Static("Contract.Sdk.Rukh.Limits", "FramePayloadMax"), 1048576L), "FramePayloadMax");
            Spot("rukh/lifecycle-cap", object.Equals(Static("Contract.Sdk.Rukh.Limits", "LifecyclePayloadMax"), 16384L), "LifecyclePayloadMax");
            var mixed = Enum.Parse(SdkType("Contract.Sdk.Rukh.Codes+CliExitCodes"), "NotExecuted");
            Spot("rukh/mixed-table", object.Equals(Wire(mixed), 125L), "CliExitCodes.NotExecuted = 125");
        }
        if (modules.Contains("toolchannel"))
        {
            Spot("toolchannel/handshake", object.Equals(Static("Contract.Sdk.Toolchannel.Limits", "HandshakeSeconds"), TimeSpan.FromSeconds(10)), "HandshakeSeconds");
            Spot("toolchannel/ws-cap", object.Equals(Static("Contract.Sdk.Toolchannel.Channels", "WsCap"), 8388608L), "WsCap");
            var close = Enum.Parse(SdkType("Contract.Sdk.Toolchannel.Codes+CloseCodes"), "VersionUnsupported");
            Spot("toolchannel/close-code", object.Equals(Wire(close), 4001L) && Convert.ToInt64(close) == 4001L, "CloseCodes.VersionUnsupported = 4001");
        }
        if (modules.Contains("xsession"))
        {
            Spot("xsession/line-max", object.Equals(Static("Contract.Sdk.Xsession.Limits", "LineMax"), 1048576L), "LineMax");
            Spot("xsession/rate-burst", object.Equals(Static("Contract.Sdk.Xsession.Limits", "PerSenderRateBurst"), 30L), "PerSenderRateBurst");
        }
    }

    static void Decodes(string id, string module, string typeName, string text, string expectRuntimeType)
    {
        var types = TypesOf(module);
        if (types == null) return;
        try
        {
            object v = Codec.Decode(text, types[typeName]);
            Expect(v.GetType().Name == expectRuntimeType, "unions/" + id, "decoded as " + v.GetType().Name + ", expected " + expectRuntimeType);
        }
        catch (Exception e) { Fail("unions/" + id, Unwrap(e).Message); }
    }

    static void Rejects(string id, string module, string typeName, string text, string label)
    {
        var types = TypesOf(module);
        if (types == null) return;
        try
        {
            Codec.Decode(text, types[typeName]);
            Fail("rejects/" + id, "accepted " + text);
        }
        catch (ContractException e) { Expect(e.Label == label, "rejects/" + id, "labelled " + e.Label + ", expected " + label + ": " + e.Message); }
        catch (Exception e) { Fail("rejects/" + id, Unwrap(e).GetType().Name + ": " + Unwrap(e).Message); }
    }

    // Hand-picked cases the vectors do not cover: JSON-RPC branch picking, a tag that is not the
    // first member, explicit null in a required string, an unknown tag value.
    static void Extra(List<string> modules)
    {
        if (modules.Contains("rukh"))
        {
            Decodes("rukh/request", "rukh", "Message", "{\"jsonrpc\":\"2.0\",\"id\":\"c:1\",\"method\":\"m\"}", "Request");
            Decodes("rukh/notification", "rukh", "Message", "{\"method\":\"m\",\"jsonrpc\":\"2.0\"}", "Notification");
            Decodes("rukh/response", "rukh", "Message", "{\"jsonrpc\":\"2.0\",\"id\":\"c:1\",\"result\":{}}", "SuccessResponse");
            Decodes("rukh/error", "rukh", "Message", "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}", "ErrorResponse");
            Rejects("rukh/notification-bad-version", "rukh", "Message", "{\"jsonrpc\":\"1.0\",\"method\":\"m\"}", Labels.BadLiteral);
            Rejects("rukh/error-code-range", "rukh", "Message", "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"error\":{\"code\":1,\"message\":\"x\"}}", Labels.OutOfRange);
            Rejects("rukh/top-level-null", "rukh", "Message", "null", Labels.WrongType);
            Rejects("rukh/top-level-array", "rukh", "Message", "[]", Labels.WrongType);
        }
        if (modules.Contains("toolchannel"))
        {
            Decodes("toolchannel/int-id", "toolchannel", "JsonRpcMessage", "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", "JsonRpcRequest");
            Decodes("toolchannel/content-tag-last", "toolchannel", "ContentBlock", "{\"text\":\"hi\",\"type\":\"text\"}", "TextContent");
            Rejects("toolchannel/content-unknown-tag", "toolchannel", "ContentBlock", "{\"type\":\"video\"}", Labels.BadLiteral);
            Rejects("toolchannel/content-missing-tag", "toolchannel", "ContentBlock", "{\"text\":\"hi\"}", Labels.MissingField);
            Rejects("toolchannel/id-bool", "toolchannel", "JsonRpcMessage", "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", Labels.WrongType);
        }
        if (modules.Contains("kernel"))
        {
            Decodes("kernel/type-second", "kernel", "Message", "{\"v\":1,\"type\":\"event\",\"id\":\"e\",\"timestamp\":1.5,\"trace_id\":\"t\",\"method\":\"task.done\",\"payload\":{}}", "EventMessage");
            Rejects("kernel/null-required-string", "kernel", "StreamChunk", "{\"text\":null}", Labels.WrongType);
            Rejects("kernel/version-range", "kernel", "Message", "{\"v\":0,\"type\":\"event\",\"id\":\"e\",\"timestamp\":1.5,\"trace_id\":\"t\",\"method\":\"task.done\",\"payload\":{}}", Labels.OutOfRange);
            Rejects("kernel/stream-id-range", "kernel", "CommandHandleResult", "{\"stream_id\":4294967296}", Labels.OutOfRange);
        }
        if (modules.Contains("xsession"))
        {
            Decodes("xsession/inbox-user", "xsession", "InboxFrame", "{\"msgV\":1,\"msgId\":\"m\",\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}", "UserFrame");
            Decodes("xsession/inbox-auth", "xsession", "InboxFrame", "{\"msgV\":1,\"type\":\"auth\",\"token\":\"t\"}", "AuthLine");
            Decodes("xsession/inbox-control", "xsession", "InboxFrame", "{\"msgV\":1,\"msgId\":\"m\",\"type\":\"control\",\"action\":\"delivery_status\",\"status\":\"delivered\",\"origMsgId\":\"o\"}", "DeliveryStatusFrame");
            Rejects("xsession/msgv-literal", "xsession", "AuthLine", "{\"msgV\":2,\"type\":\"auth\",\"token\":\"t\"}", Labels.BadLiteral);
        }
    }

    public static int Main(string[] args)
    {
        if (args.Length < 1)
        {
            Console.Error.WriteLine("usage: tests.dll VECTORS_DIR");
            return 2;
        }
        string dir = args[0];
        var modules = new List<string>();
        foreach (var sub in Directory.GetDirectories(dir).OrderBy(x => x))
        {
            string module = Path.GetFileName(sub);
            var types = TypesOf(module);
            if (types == null)
            {
                Fail(module, "no generated contract for vectors dir " + sub);
                continue;
            }
            modules.Add(module);
            int before = passed + failed;
            string valid = Path.Combine(sub, "valid.json");
            string invalid = Path.Combine(sub, "invalid.json");
            if (File.Exists(valid)) Valid(module, valid, types); else Fail(module, "no valid.json");
            if (File.Exists(invalid)) Invalid(module, invalid, types);
            Framing(module, dir);
            Enums(module, types);
            Machines(module);
            Immutable(module);
            string machines = Path.Combine(sub, "machines.json");
            if (File.Exists(machines)) MachineVectors(module, machines); else Fail(module, "no machines.json");
            string rulesFile = Path.Combine(sub, "rules.json");
            if (File.Exists(rulesFile)) RuleVectors(module, rulesFile); else Fail(module, "no rules.json");
            Console.WriteLine(module + ": " + (passed + failed - before) + " checks");
        }
        Constants(modules);
        Extra(modules);
        Constructors(modules);
        WireRules(modules);
        Expect(modules.Count > 0, "vectors", "no contract directories in " + dir);
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }
}
