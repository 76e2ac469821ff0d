// Tests of the wire rules the generated C# SDK enforces from the contract (C# 7.3 syntax, builds with
// Mono mcs): a channel's JSON rules (rukh ipc: the strict profile, depth and item caps; kernel control
// and toolchannel ws: the caps alone), per-method frame caps (rukh lifecycle methods, rukh.log's
// "ignore") and the framing's frame deadline (rukh ipc: 2 s from a frame's first byte), the last over a
// real Unix socket. Each rule is broken on purpose and each exact limit is accepted.
// run.sh defines CONTRACT_<MODULE> for every generated module; a module present without its section
// compiled is a failure, not a skip.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Contract.Runtime;

public static partial class Tests
{
    static void WireRules(List<string> modules)
    {
        foreach (var m in new[] { "rukh", "kernel", "toolchannel" })
        {
            if (modules.Contains(m) && !WireSectionCompiled(m)) Fail("wire/" + m, "the wire-rule tests of " + m + " were not compiled in (CONTRACT_" + m.ToUpperInvariant() + " undefined)");
        }
#if CONTRACT_RUKH
        RukhJsonRules();
        RukhMethodCaps();
        RukhFrameDeadline();
#endif
#if CONTRACT_KERNEL
        KernelControlCaps();
#endif
#if CONTRACT_TOOLCHANNEL
        ToolchannelWsCaps();
#endif
#if CONTRACT_XSESSION
        // A channel with no JSON rules of its own keeps the plain decode.
        Expect(typeof(Contract.Sdk.Xsession.Channels).GetField("InboxJsonRules") == null, "wire/xsession/no-rules", "InboxJsonRules exists");
        try
        {
            var env = Contract.Sdk.Xsession.Channels.DecodeInboxMessage("{\"msgV\":1,\"type\":\"auth\",\"token\":\"t\"}");
            Expect(env.Type == "auth", "wire/xsession/decode", "type " + env.Type);
        }
        catch (Exception e) { Fail("wire/xsession/decode", Unwrap(e).Message); }
#endif
    }

    static bool WireSectionCompiled(string module)
    {
        switch (module)
        {
#if CONTRACT_RUKH
            case "rukh": return true;
#endif
#if CONTRACT_KERNEL
            case "kernel": return true;
#endif
#if CONTRACT_TOOLCHANNEL
            case "toolchannel": return true;
#endif
            default: return false;
        }
    }

    // ------------------------------------------------------------------ helpers

    static byte[] Utf8(string s) { return Encoding.UTF8.GetBytes(s); }

    static byte[] Concat(params byte[][] parts)
    {
        var ms = new MemoryStream();
        foreach (var p in parts) ms.Write(p, 0, p.Length);
        return ms.ToArray();
    }

    /// <summary>A JSON object nested <paramref name="levels"/> deep ({"d":{"d":…{}}}).</summary>
    static string Nested(int levels)
    {
        var sb = new StringBuilder();
        for (int k = 0; k < levels - 1; k++) sb.Append("{\"d\":");
        sb.Append("{}");
        sb.Append('}', levels - 1);
        return sb.ToString();
    }

    /// <summary>Nesting depth as the contracts count it: the top-level container is 1.</summary>
    static int Depth(JsonElement e)
    {
        int inner = 0;
        if (e.ValueKind == JsonValueKind.Object) foreach (var p in e.EnumerateObject()) inner = Math.Max(inner, Depth(p.Value));
        else if (e.ValueKind == JsonValueKind.Array) foreach (var x in e.EnumerateArray()) inner = Math.Max(inner, Depth(x));
        else return 0;
        return 1 + inner;
    }

    /// <summary>Object members plus array elements, all levels.</summary>
    static long Items(JsonElement e)
    {
        long n = 0;
        if (e.ValueKind == JsonValueKind.Object) foreach (var p in e.EnumerateObject()) n += 1 + Items(p.Value);
        else if (e.ValueKind == JsonValueKind.Array) foreach (var x in e.EnumerateArray()) n += 1 + Items(x);
        return n;
    }

    static int DepthOf(string json) { using (var d = JsonDocument.Parse(json, new JsonDocumentOptions { MaxDepth = 1000 })) return Depth(d.RootElement); }
    static long ItemsOf(string json) { using (var d = JsonDocument.Parse(json)) return Items(d.RootElement); }

    static string Zeros(int n) { return string.Join(",", Enumerable.Repeat("0", n)); }

    /// <summary><paramref name="head"/> + a run of 'x' + <paramref name="tail"/>, exactly <paramref name="size"/> bytes.</summary>
    static byte[] Sized(string head, string tail, long size)
    {
        long pad = size - Utf8(head + tail).Length;
        var b = Utf8(head + new string('x', (int)pad) + tail);
        if (b.Length != size) throw new InvalidOperationException("sized frame is " + b.Length + ", not " + size);
        return b;
    }

    /// <summary>The labelled rejection <paramref name="decode"/> gives (label parse), or null after a recorded failure.</summary>
    static ContractException ParseError(string id, Action decode)
    {
        try
        {
            decode();
            Fail(id, "accepted");
        }
        catch (ContractException e)
        {
            if (e.Label == Labels.Parse) return e;
            Fail(id, "labelled " + e.Label + ", expected parse: " + e.Message);
        }
        catch (Exception e)
        {
            e = Unwrap(e);
            Fail(id, "rejected with " + e.GetType().Name + ": " + e.Message);
        }
        return null;
    }

    static void ExpectRule(string id, Action decode, string rule, string detailHas)
    {
        var e = ParseError(id, decode);
        if (e == null) return;
        Expect(e.Rule == rule && (detailHas == null || e.Detail.Contains(detailHas)), id,
            "rule " + (e.Rule ?? "null") + " (expected " + rule + "), detail: " + e.Detail);
    }

    static T Thrown<T>(string id, Action a) where T : Exception
    {
        try
        {
            a();
            Fail(id, "expected " + typeof(T).Name);
        }
        catch (Exception e)
        {
            e = Unwrap(e);
            var t = e as T;
            if (t != null) return t;
            Fail(id, "expected " + typeof(T).Name + ", got " + e.GetType().Name + ": " + e.Message);
        }
        return null;
    }

    static void Accepts(string id, Func<object> decode, string runtimeType)
    {
        try
        {
            object v = decode();
            Expect(v != null && v.GetType().Name == runtimeType, id, "decoded as " + (v == null ? "null" : v.GetType().Name) + ", expected " + runtimeType);
        }
        catch (Exception e)
        {
            e = Unwrap(e);
            Fail(id, "rejected: " + e.GetType().Name + ": " + e.Message);
        }
    }

#if CONTRACT_RUKH
    // ------------------------------------------------------------------ rukh ipc: strict profile, depth, items

    // params of a request are not typed by the envelope, so any object decodes.
    const string UiHead = "{\"jsonrpc\":\"2.0\",\"id\":\"c:2\",\"method\":\"rukh.ui.event\",\"params\":";

    static string UiRequest(string paramsJson) { return UiHead + paramsJson + "}"; }

    static void RukhJsonRules()
    {
        const string id = "wire/rukh/";
        var rules = Contract.Sdk.Rukh.Channels.IpcJsonRules;
        Expect(rules.Strict && rules.ObjectOnly && rules.MaxDepth == Contract.Sdk.Rukh.Limits.JsonDepthMax && rules.MaxItems == Contract.Sdk.Rukh.Limits.JsonItemsMax,
            id + "rules-from-contract", "IpcJsonRules = " + rules.Strict + ", " + rules.ObjectOnly + ", " + rules.MaxDepth + ", " + rules.MaxItems);
        Expect(Contract.Sdk.Rukh.Limits.JsonDepthMax == 32 && Contract.Sdk.Rukh.Limits.JsonItemsMax == 4096, id + "rules-values", "JsonDepthMax/JsonItemsMax");

        // Duplicate keys: the key and the JSON pointer of its object (System.Text.Json alone keeps them).
        var dup = ParseError(id + "duplicate-key", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(UiRequest("{\"a\":[{\"x\":1,\"x\":2}]}")); });
        if (dup != null)
        {
            Expect(dup.Rule == JsonRuleNames.DuplicateKey && dup.Detail == "duplicate key \"x\" at /params/a/0" && dup.Path == "$.params.a[0]",
                id + "duplicate-key", "rule " + dup.Rule + ", detail " + dup.Detail + ", path " + dup.Path);
        }
        var top = ParseError(id + "duplicate-key-top", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage("{\"jsonrpc\":\"2.0\",\"id\":\"c:2\",\"id\":\"c:3\",\"method\":\"rukh.ui.event\"}"); });
        if (top != null)
        {
            Expect(top.Rule == JsonRuleNames.DuplicateKey && top.Detail.Contains("\"id\"") && top.Path == "$", id + "duplicate-key-top", top.Detail + " at " + top.Path);
        }
        // "a" and "\u0061" are the same key.
        ExpectRule(id + "duplicate-key-escaped", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(UiRequest("{\"a\":1,\"\\u0061\":2}")); }, JsonRuleNames.DuplicateKey, "\"a\"");

        // Integers within ±(2^53 − 1).
        foreach (var n in new[] { "9007199254740992", "-9007199254740992", "1000000000000000000000000000000" })
        {
            ExpectRule(id + "unsafe-integer/" + n, delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(UiRequest("{\"k\":" + n + "}")); }, JsonRuleNames.UnsafeInteger, n);
        }
        try
        {
            var m = (Contract.Sdk.Rukh.Request)Contract.Sdk.Rukh.Channels.DecodeIpcMessage(UiRequest("{\"k\":9007199254740991,\"m\":-9007199254740991,\"f\":1.5e300}"));
            Expect(m.Params["k"].GetInt64() == 9007199254740991L && m.Params["m"].GetInt64() == -9007199254740991L && m.Params["f"].GetDouble() == 1.5e300,
                id + "safe-integer", "params " + m.Params["k"] + ", " + m.Params["m"] + ", " + m.Params["f"]);
        }
        catch (Exception e) { Fail(id + "safe-integer", Unwrap(e).Message); }

        // The other rules of the profile, each with its own name.
        string good = UiRequest("{}");
        var cases = new List<KeyValuePair<string, byte[]>>
        {
            new KeyValuePair<string, byte[]>(JsonRuleNames.Bom, Concat(new byte[] { 0xEF, 0xBB, 0xBF }, Utf8(good))),
            new KeyValuePair<string, byte[]>(JsonRuleNames.InvalidUtf8, Concat(Utf8(UiHead + "{\"k\":\""), new byte[] { 0xFF }, Utf8("\"}}"))),
            new KeyValuePair<string, byte[]>(JsonRuleNames.LoneSurrogate, Utf8(UiRequest("{\"k\":\"\\ud800\"}"))),
            new KeyValuePair<string, byte[]>(JsonRuleNames.NonFinite, Utf8(UiRequest("{\"k\":1e400}"))),
            new KeyValuePair<string, byte[]>(JsonRuleNames.Syntax, Utf8(UiRequest("{\"k\":NaN}"))),
            new KeyValuePair<string, byte[]>(JsonRuleNames.TrailingBytes, Utf8(good + "{}")),
            new KeyValuePair<string, byte[]>(JsonRuleNames.NonObject, Utf8("[" + good + "]")),
        };
        foreach (var c in cases)
        {
            var data = c.Value;
            ExpectRule(id + c.Key, delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(data); }, c.Key, null);
        }
        var bad = ParseError(id + "invalid-utf8-offset", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(cases[1].Value); });
        if (bad != null) Expect(bad.Detail == "invalid UTF-8 at byte " + Utf8(UiHead + "{\"k\":\"").Length, id + "invalid-utf8-offset", bad.Detail);
        // A lone surrogate names the failure even when something else is wrong later in the frame.
        ExpectRule(id + "lone-surrogate-first", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(UiRequest("{\"k\":\"\\udc00\",\"k\":1}")); }, JsonRuleNames.LoneSurrogate, "\\uDC00");
        // A surrogate pair is one character, not a lone surrogate; trailing whitespace is fine.
        try
        {
            var m = (Contract.Sdk.Rukh.Request)Contract.Sdk.Rukh.Channels.DecodeIpcMessage(UiRequest("{\"k\":\"\\ud83d\\ude00\"}") + " \n");
            Expect(m.Params["k"].GetString() == "\U0001F600", id + "surrogate-pair", m.Params["k"].GetString());
        }
        catch (Exception e) { Fail(id + "surrogate-pair", Unwrap(e).Message); }
        // The rules are the channel's: the plain codec accepts a duplicate key.
        try { Codec.Decode(UiRequest("{\"x\":1,\"x\":2}"), typeof(Contract.Sdk.Rukh.Message)); Pass(); }
        catch (Exception e) { Fail(id + "plain-codec-lenient", Unwrap(e).Message); }

        // Depth: 32 passes, 33 is refused (the request is depth 1, params 2, so params holding Nested(n) make n + 2).
        long maxDepth = Contract.Sdk.Rukh.Limits.JsonDepthMax;
        string atCap = UiRequest("{\"d\":" + Nested((int)maxDepth - 2) + "}");
        string over = UiRequest("{\"d\":" + Nested((int)maxDepth - 1) + "}");
        Expect(DepthOf(atCap) == 32 && DepthOf(over) == 33, id + "depth-fixture", DepthOf(atCap) + " / " + DepthOf(over));
        Accepts(id + "depth-32", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(atCap); }, "Request");
        ExpectRule(id + "depth-33", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(over); }, JsonRuleNames.Depth, "nesting deeper than 32");
        // Far past any cap: still the depth rule, and no stack overflow.
        string deep = string.Concat(Enumerable.Repeat("{\"a\":", 100000)) + "1" + new string('}', 100000);
        ExpectRule(id + "depth-100000", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(deep); }, JsonRuleNames.Depth, null);

        // Items: 4096 pass, 4097 are refused; members count like elements.
        long maxItems = Contract.Sdk.Rukh.Limits.JsonItemsMax;
        long baseItems = ItemsOf(UiRequest("{\"pad\":[]}"));
        string fits = UiRequest("{\"pad\":[" + Zeros((int)(maxItems - baseItems)) + "]}");
        string tooMany = UiRequest("{\"pad\":[" + Zeros((int)(maxItems - baseItems + 1)) + "]}");
        Expect(ItemsOf(fits) == 4096 && ItemsOf(tooMany) == 4097, id + "items-fixture", ItemsOf(fits) + " / " + ItemsOf(tooMany));
        Accepts(id + "items-4096", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(fits); }, "Request");
        ExpectRule(id + "items-4097", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(tooMany); }, JsonRuleNames.Items, "more than 4096");
        int members = (int)(maxItems - ItemsOf(UiRequest("{}")) + 1);
        string wide = UiRequest("{" + string.Join(",", Enumerable.Range(0, members).Select(k => "\"m" + k + "\":0")) + "}");
        Expect(ItemsOf(wide) == 4097, id + "items-members-fixture", ItemsOf(wide).ToString());
        ExpectRule(id + "items-4097-members", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(wide); }, JsonRuleNames.Items, null);
    }

    // ------------------------------------------------------------------ rukh per-method caps

    static void RukhMethodCaps()
    {
        const string id = "wire/rukh/method-cap/";
        var caps = Contract.Sdk.Rukh.Channels.IpcMethodCaps;
        long cap = Contract.Sdk.Rukh.Limits.LifecyclePayloadMax;
        var names = caps.Keys.OrderBy(k => k, StringComparer.Ordinal).ToArray();
        Expect(string.Join(",", names) == "rukh.cancel,rukh.close,rukh.initialize,rukh.log", id + "methods", string.Join(",", names));
        Expect(cap == 16384 && caps.Values.All(c => c.Limit == "lifecyclePayloadMax" && c.Cap == cap), id + "limit", "caps are not lifecyclePayloadMax = 16384");
        Expect(caps["rukh.log"].Ignore && !caps["rukh.initialize"].Ignore && !caps["rukh.cancel"].Ignore && !caps["rukh.close"].Ignore, id + "ignore-flags", "only rukh.log says ignore");

        // A request of exactly the cap passes; one byte more is refused with the method, cap and limit.
        const string initHead = "{\"jsonrpc\":\"2.0\",\"id\":\"c:1\",\"method\":\"rukh.initialize\",\"params\":{\"pad\":\"";
        var initAt = Sized(initHead, "\"}}", cap);
        var initOver = Sized(initHead, "\"}}", cap + 1);
        Accepts(id + "initialize-16384", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(initAt); }, "Request");
        var e = Thrown<MethodFrameTooLargeException>(id + "initialize-16385", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(initOver); });
        if (e != null)
        {
            Expect(e is FrameTooLargeException && e is FrameException && e is IOException, id + "initialize-16385/types", "hierarchy");
            Expect(e.Method == "rukh.initialize" && e.Cap == 16384 && e.Length == 16385 && e.Limit == "lifecyclePayloadMax" && !e.Ignore && !e.Reply,
                id + "initialize-16385/fields", e.Message);
        }
        // A method without a cap of its own has only the channel's.
        var invoke = Sized("{\"jsonrpc\":\"2.0\",\"id\":\"c:2\",\"method\":\"rukh.invoke\",\"params\":{\"pad\":\"", "\"}}", 100000);
        Accepts(id + "uncapped-method", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(invoke); }, "Request");

        // rukh.log over its cap: drop and count (Ignore), not an error.
        const string logHead = "{\"jsonrpc\":\"2.0\",\"method\":\"rukh.log\",\"params\":{\"level\":\"info\",\"message\":\"m\",\"pad\":\"";
        Accepts(id + "log-16384", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(Sized(logHead, "\"}}", cap)); }, "Notification");
        var log = Thrown<MethodFrameTooLargeException>(id + "log-16385", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(Sized(logHead, "\"}}", cap + 1)); });
        if (log != null) Expect(log.Ignore && log.Method == "rukh.log" && !log.Reply && log.Message.Contains("dropped"), id + "log-ignore", log.Message);

        // Replies: capped by the method they answer.
        const string replyHead = "{\"jsonrpc\":\"2.0\",\"id\":\"c:1\",\"result\":{\"pad\":\"";
        var replyAt = Sized(replyHead, "\"}}", cap);
        var replyOver = Sized(replyHead, "\"}}", cap + 1);
        try { Contract.Sdk.Rukh.Channels.CheckIpcReply("rukh.initialize", replyAt); Pass(); }
        catch (Exception x) { Fail(id + "reply-16384", Unwrap(x).Message); }
        try { Contract.Sdk.Rukh.Channels.CheckIpcReply("rukh.invoke", replyOver); Pass(); }
        catch (Exception x) { Fail(id + "reply-uncapped", Unwrap(x).Message); }
        var r = Thrown<MethodFrameTooLargeException>(id + "reply-16385", delegate { Contract.Sdk.Rukh.Channels.CheckIpcReply("rukh.close", replyOver); });
        if (r != null) Expect(r.Method == "rukh.close" && r.Reply && !r.Ignore && r.Length == 16385 && r.Cap == 16384, id + "reply-16385/fields", r.Message);
        var rt = Thrown<MethodFrameTooLargeException>(id + "reply-16385-text", delegate { Contract.Sdk.Rukh.Channels.CheckIpcReply("rukh.initialize", Encoding.UTF8.GetString(replyOver)); });
        if (rt != null) Expect(rt.Reply && rt.Length == 16385, id + "reply-16385-text/fields", rt.Message);
        // The decoder checks a reply when told which method its id answers.
        var pending = new Dictionary<string, string> { { "c:1", "rukh.initialize" } };
        Func<JsonElement, string> answers = corr =>
        {
            string method;
            return corr.ValueKind == JsonValueKind.String && pending.TryGetValue(corr.GetString(), out method) ? method : null;
        };
        Accepts(id + "reply-unknown-method", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(replyOver); }, "SuccessResponse");
        Accepts(id + "reply-16384-decode", delegate { return Contract.Sdk.Rukh.Channels.DecodeIpcMessage(replyAt, answers); }, "SuccessResponse");
        var rd = Thrown<MethodFrameTooLargeException>(id + "reply-16385-decode", delegate { Contract.Sdk.Rukh.Channels.DecodeIpcMessage(replyOver, answers); });
        if (rd != null) Expect(rd.Reply && rd.Method == "rukh.initialize" && !rd.Ignore, id + "reply-16385-decode/fields", rd.Message);
    }

    // ------------------------------------------------------------------ rukh frame deadline (real sockets)

    /// <summary>A connected pair of Unix stream sockets (as rukh's inherited socketpair).</summary>
    static void SocketPair(out Socket a, out Socket b)
    {
        string path = Path.Combine(Path.GetTempPath(), "cs-sdk-" + Guid.NewGuid().ToString("N").Substring(0, 16) + ".sock");
        var ep = new UnixDomainSocketEndPoint(path);
        using (var listener = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified))
        {
            listener.Bind(ep);
            listener.Listen(1);
            a = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
            a.Connect(ep);
            b = listener.Accept();
        }
        File.Delete(path);
    }

    /// <summary>Run <paramref name="body"/> with a deadline of its own, so a reader that never gives up fails the test instead of hanging it.</summary>
    static void Bounded(string id, int seconds, Func<Task> body)
    {
        Task t = Task.Run(body);
        try
        {
            if (!t.Wait(TimeSpan.FromSeconds(seconds))) Fail(id, "still running after " + seconds + " s");
        }
        catch (AggregateException e)
        {
            Fail(id, "threw " + Unwrap(e.InnerException).GetType().Name + ": " + Unwrap(e.InnerException).Message);
        }
    }

    static void ExpectIncomplete(string id, FrameIncompleteException e, double seconds, long received, Stopwatch took, bool timed)
    {
        if (e == null) return;
        Expect(e.Limit == "incompleteFrameSeconds" && e.Seconds == seconds && e.Received == received && e is FrameException,
            id + "/fields", "limit " + e.Limit + ", seconds " + e.Seconds + ", received " + e.Received + " (expected " + received + ")");
        if (timed)
        {
            double s = took.Elapsed.TotalSeconds;
            Expect(s >= seconds - 0.05 && s < seconds + 1.5, id + "/timing", "gave up after " + s + " s, deadline " + seconds + " s");
        }
    }

    static async Task<T> Catch<T>(Func<Task> a) where T : Exception
    {
        try
        {
            await a();
        }
        catch (T e)
        {
            return e;
        }
        return null;
    }

    static void RukhFrameDeadline()
    {
        const string id = "wire/rukh/deadline/";
        var d = Contract.Sdk.Rukh.Channels.IpcFrameDeadline;
        Expect(d.Limit == "incompleteFrameSeconds" && d.After == Contract.Sdk.Rukh.Limits.IncompleteFrameSeconds && d.After == TimeSpan.FromSeconds(2),
            id + "from-contract", d.Limit + " " + d.After);
        Expect(Contract.Sdk.Rukh.Channels.IpcFraming().Deadline == d, id + "framing", "IpcFraming() has no deadline");
        double real = Contract.Sdk.Rukh.Limits.IncompleteFrameSeconds.TotalSeconds;
        var frame = Contract.Sdk.Rukh.Channels.IpcFraming().Frame(Utf8("{\"a\":1}"));

        // The real 2 s, blocking reader: 16 of 20 announced bytes, then nothing.
        Bounded(id + "sync-real", 15, delegate
        {
            Socket a, b;
            SocketPair(out a, out b);
            using (a) using (b) using (var sa = new NetworkStream(a)) using (var sb = new NetworkStream(b))
            {
                var partial = Concat(new byte[] { 0, 0, 0, 20 }, Utf8("{\"jsonrpc\":\"2.0\""));
                sa.Write(partial, 0, partial.Length);
                var took = Stopwatch.StartNew();
                var e = Thrown<FrameIncompleteException>(id + "sync-real", delegate { Contract.Sdk.Rukh.Channels.ReadIpcFrame(sb); });
                took.Stop();
                ExpectIncomplete(id + "sync-real", e, real, 20, took, true);
            }
            return Task.FromResult(0);
        });

        // The real 2 s, async reader: 3 bytes of a length prefix, then nothing.
        Bounded(id + "async-real", 15, async delegate
        {
            Socket a, b;
            SocketPair(out a, out b);
            using (a) using (b) using (var sa = new NetworkStream(a)) using (var sb = new NetworkStream(b))
            {
                // Whole frames merged in one write pass first.
                var two = Concat(frame, frame);
                await sa.WriteAsync(two, 0, two.Length);
                var f1 = await Contract.Sdk.Rukh.Channels.ReadIpcFrameAsync(sb);
                var f2 = await Contract.Sdk.Rukh.Channels.ReadIpcFrameAsync(sb);
                Expect(f1 != null && f2 != null && Encoding.UTF8.GetString(f2) == "{\"a\":1}", id + "async-merged", "merged frames not read back");
                await sa.WriteAsync(new byte[] { 0, 0, 0 }, 0, 3);
                var took = Stopwatch.StartNew();
                var e = await Catch<FrameIncompleteException>(() => Contract.Sdk.Rukh.Channels.ReadIpcFrameAsync(sb));
                took.Stop();
                Expect(e != null, id + "async-real", "no FrameIncompleteException");
                ExpectIncomplete(id + "async-real", e, real, 3, took, true);
            }
        });

        // A shortened deadline (same runtime path) for the properties that need several rounds.
        var shortDeadline = new FrameDeadline("incompleteFrameSeconds", TimeSpan.FromMilliseconds(500));
        var shortFraming = new LengthPrefixedFraming(4, true, Contract.Sdk.Rukh.Channels.IpcCap, shortDeadline);

        // Idling before a frame's first byte is not an incomplete frame.
        Bounded(id + "idle-first", 15, delegate
        {
            Socket a, b;
            SocketPair(out a, out b);
            using (a) using (b) using (var sa = new NetworkStream(a)) using (var sb = new NetworkStream(b))
            {
                var writer = Task.Run(async delegate { await Task.Delay(800); await sa.WriteAsync(frame, 0, frame.Length); });
                try
                {
                    var got = shortFraming.ReadFrame(sb);
                    Expect(got != null && Encoding.UTF8.GetString(got) == "{\"a\":1}", id + "idle-first", "frame not read");
                }
                catch (Exception e) { Fail(id + "idle-first", Unwrap(e).GetType().Name + ": " + Unwrap(e).Message); }
                writer.Wait(5000);
            }
            return Task.FromResult(0);
        });

        // One byte every 0.1 s: steady progress, but the whole frame needs 1.1 s; progress does not reset the clock.
        foreach (bool useAsync in new[] { false, true })
        {
            string tid = id + (useAsync ? "trickle-async" : "trickle-sync");
            Bounded(tid, 15, async delegate
            {
                Socket a, b;
                SocketPair(out a, out b);
                using (a) using (b) using (var sa = new NetworkStream(a)) using (var sb = new NetworkStream(b))
                {
                    var writer = Task.Run(async delegate
                    {
                        try
                        {
                            for (int k = 0; k < frame.Length; k++)
                            {
                                await sa.WriteAsync(frame, k, 1);
                                await Task.Delay(100);
                            }
                        }
                        catch (IOException) { }
                        catch (ObjectDisposedException) { }
                    });
                    var took = Stopwatch.StartNew();
                    FrameIncompleteException e;
                    if (useAsync) e = await Catch<FrameIncompleteException>(() => shortFraming.ReadFrameAsync(sb));
                    else e = Thrown<FrameIncompleteException>(tid, delegate { shortFraming.ReadFrame(sb); });
                    took.Stop();
                    Expect(e != null, tid, "no FrameIncompleteException");
                    if (e != null)
                    {
                        Expect(e.Received >= 2 && e.Received < frame.Length, tid + "/received", e.Received + " of " + frame.Length);
                        Expect(took.Elapsed.TotalSeconds < 1.0, tid + "/timing", "gave up after " + took.Elapsed.TotalSeconds + " s, deadline 0.5 s");
                    }
                    await writer;
                }
            });
        }

        // The caller's own cancellation stays the caller's: OperationCanceledException, not an incomplete frame.
        Bounded(id + "caller-cancel", 15, async delegate
        {
            Socket a, b;
            SocketPair(out a, out b);
            using (a) using (b) using (var sa = new NetworkStream(a)) using (var sb = new NetworkStream(b))
            using (var cts = new CancellationTokenSource(TimeSpan.FromMilliseconds(300)))
            {
                await sa.WriteAsync(new byte[] { 0, 0 }, 0, 2);
                var took = Stopwatch.StartNew();
                Exception e = await Catch<Exception>(() => Contract.Sdk.Rukh.Channels.ReadIpcFrameAsync(sb, cts.Token));
                took.Stop();
                Expect(e is OperationCanceledException && took.Elapsed.TotalSeconds < real, id + "caller-cancel",
                    (e == null ? "no exception" : e.GetType().Name) + " after " + took.Elapsed.TotalSeconds + " s");
            }
        });

        // A stream that ends inside a frame is truncated, not incomplete; a clean end between frames is null.
        Thrown<EndOfStreamException>(id + "truncated", delegate { Contract.Sdk.Rukh.Channels.ReadIpcFrame(new MemoryStream(frame.Take(frame.Length - 1).ToArray())); });
        try { Expect(Contract.Sdk.Rukh.Channels.ReadIpcFrame(new MemoryStream(new byte[0])) == null, id + "clean-end", "not null"); }
        catch (Exception e) { Fail(id + "clean-end", Unwrap(e).Message); }
        // Over the cap: refused from the prefix alone, as without a deadline.
        Thrown<FrameTooLargeException>(id + "oversize", delegate { Contract.Sdk.Rukh.Channels.ReadIpcFrame(new MemoryStream(new byte[] { 0xFF, 0xFF, 0xFF, 0xFF })); });

        // Framings without a frameDeadline have none.
#if CONTRACT_KERNEL
        Expect(typeof(Contract.Sdk.Kernel.Channels).GetField("ControlFrameDeadline") == null && Contract.Sdk.Kernel.Channels.ControlFraming().Deadline == null,
            "wire/kernel/no-deadline", "kernel control has a frame deadline");
#endif
    }
#endif

#if CONTRACT_KERNEL
    // ------------------------------------------------------------------ kernel control: caps without the strict profile

    static string KernelEvent(string payload)
    {
        return "{\"v\":1,\"type\":\"event\",\"id\":\"e\",\"timestamp\":1.5,\"trace_id\":\"t\",\"method\":\"ping\",\"payload\":" + payload + "}";
    }

    static void KernelControlCaps()
    {
        const string id = "wire/kernel/";
        var rules = Contract.Sdk.Kernel.Channels.ControlJsonRules;
        long maxDepth = Contract.Sdk.Kernel.Limits.JsonMaxDepth, maxItems = Contract.Sdk.Kernel.Limits.JsonMaxItems;
        Expect(!rules.Strict && rules.ObjectOnly && rules.MaxDepth == maxDepth && rules.MaxItems == maxItems && maxDepth == 64 && maxItems == 100000,
            id + "rules-from-contract", "ControlJsonRules = " + rules.Strict + ", " + rules.ObjectOnly + ", " + rules.MaxDepth + ", " + rules.MaxItems);
        Expect(typeof(Contract.Sdk.Kernel.Channels).GetField("ControlMethodCaps") == null, id + "no-method-caps", "kernel methods have no caps of their own");

        // Not strict: a duplicate key and a big integer are kept, as System.Text.Json keeps them.
        try
        {
            var m = (Contract.Sdk.Kernel.EventMessage)Contract.Sdk.Kernel.Channels.DecodeControlMessage(KernelEvent("{\"a\":1,\"a\":2,\"n\":9007199254740993}"));
            Expect(m.Payload["a"].GetRawText() == "2" && m.Payload["n"].GetRawText() == "9007199254740993", id + "lenient", m.Payload["a"] + " " + m.Payload["n"]);
        }
        catch (Exception e) { Fail(id + "lenient", Unwrap(e).GetType().Name + ": " + Unwrap(e).Message); }

        // Depth: the event is 1, its payload 2, so a payload of Nested(n) makes n + 1.
        string atCap = KernelEvent(Nested((int)maxDepth - 1));
        string over = KernelEvent(Nested((int)maxDepth));
        Expect(DepthOf(atCap) == 64 && DepthOf(over) == 65, id + "depth-fixture", DepthOf(atCap) + " / " + DepthOf(over));
        Accepts(id + "depth-64", delegate { return Contract.Sdk.Kernel.Channels.DecodeControlMessage(atCap); }, "EventMessage");
        ExpectRule(id + "depth-65", delegate { Contract.Sdk.Kernel.Channels.DecodeControlMessage(over); }, JsonRuleNames.Depth, "nesting deeper than 64");
        string deep = KernelEvent(Nested(5000));
        ExpectRule(id + "depth-5000", delegate { Contract.Sdk.Kernel.Channels.DecodeControlMessage(deep); }, JsonRuleNames.Depth, null);

        // Items: 100000 pass, 100001 are refused.
        long baseItems = ItemsOf(KernelEvent("{\"pad\":[]}"));
        string fits = KernelEvent("{\"pad\":[" + Zeros((int)(maxItems - baseItems)) + "]}");
        string tooMany = KernelEvent("{\"pad\":[" + Zeros((int)(maxItems - baseItems + 1)) + "]}");
        Expect(ItemsOf(fits) == 100000 && ItemsOf(tooMany) == 100001, id + "items-fixture", ItemsOf(fits) + " / " + ItemsOf(tooMany));
        Accepts(id + "items-100000", delegate { return Contract.Sdk.Kernel.Channels.DecodeControlMessage(fits); }, "EventMessage");
        ExpectRule(id + "items-100001", delegate { Contract.Sdk.Kernel.Channels.DecodeControlMessage(tooMany); }, JsonRuleNames.Items, "more than 100000");

        // noNull (K-22): a null anywhere is refused, by its own rule, where it is.
        Expect(rules.NoNull, id + "no-null-from-contract", "ControlJsonRules.NoNull = " + rules.NoNull);
        ExpectRule(id + "no-null", delegate { Contract.Sdk.Kernel.Channels.DecodeControlMessage(KernelEvent("{\"a\":{\"b\":[1,null]}}")); }, JsonRuleNames.Null, "$.payload.a.b[1]");

        // Malformed JSON on a channel that is not strict is a parse rejection without a rule.
        var syntax = ParseError(id + "syntax", delegate { Contract.Sdk.Kernel.Channels.DecodeControlMessage("{\"v\":1,"); });
        if (syntax != null) Expect(syntax.Rule == null, id + "syntax-no-rule", "rule " + syntax.Rule);
        // The types still apply after the rules.
        try
        {
            Contract.Sdk.Kernel.Channels.DecodeControlMessage("{\"v\":0,\"type\":\"event\",\"id\":\"e\",\"timestamp\":1.5,\"trace_id\":\"t\",\"method\":\"ping\",\"payload\":{}}");
            Fail(id + "types-after-rules", "accepted v 0");
        }
        catch (ContractException e) { Expect(e.Label == Labels.OutOfRange, id + "types-after-rules", e.Label); }
    }
#endif

#if CONTRACT_TOOLCHANNEL
    // ------------------------------------------------------------------ toolchannel ws: caps without the strict profile

    static void ToolchannelWsCaps()
    {
        const string id = "wire/toolchannel/";
        var rules = Contract.Sdk.Toolchannel.Channels.WsJsonRules;
        long maxDepth = Contract.Sdk.Toolchannel.Limits.MaxJsonDepth, maxItems = Contract.Sdk.Toolchannel.Limits.MaxJsonItems;
        Expect(!rules.Strict && rules.ObjectOnly && rules.MaxDepth == maxDepth && rules.MaxItems == maxItems, id + "rules-from-contract", "WsJsonRules");
        string wide = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"pad\":[" + Zeros((int)maxItems) + "]}}";
        ExpectRule(id + "items-over", delegate { Contract.Sdk.Toolchannel.Channels.DecodeWsMessage(wide); }, JsonRuleNames.Items, null);
        string fits = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"pad\":[" + Zeros((int)maxItems - 4) + "]}}";
        Expect(ItemsOf(fits) == maxItems, id + "items-fixture", ItemsOf(fits).ToString());
        Accepts(id + "items-at-cap", delegate { return Contract.Sdk.Toolchannel.Channels.DecodeWsMessage(fits); }, "JsonRpcResponse");
        string deep = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":" + Nested((int)maxDepth) + "}";
        ExpectRule(id + "depth-over", delegate { Contract.Sdk.Toolchannel.Channels.DecodeWsMessage(deep); }, JsonRuleNames.Depth, null);
        string deepFits = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":" + Nested((int)maxDepth - 1) + "}";
        Accepts(id + "depth-at-cap", delegate { return Contract.Sdk.Toolchannel.Channels.DecodeWsMessage(deepFits); }, "JsonRpcResponse");
    }
#endif
}
