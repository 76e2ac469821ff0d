// Two generated SDKs side by side (sdk-tests/csharp/run.sh step 5): Kernel.Sdk.dll and Rukh.Sdk.dll,
// each generated with its own --namespace, over one Contract.Runtime.dll. Each decodes its own
// contract's message and refuses the other's; exits 0 only if all of that holds.
using System;
using Contract.Runtime;

public static class SideBySide
{
    const string Ping = "{\"v\":1,\"type\":\"event\",\"id\":\"s-1\",\"method\":\"ping\",\"timestamp\":1.5,\"trace_id\":\"t-1\",\"payload\":{}}";
    const string Log = "{\"jsonrpc\":\"2.0\",\"method\":\"rukh.log\",\"params\":{\"level\":\"info\",\"message\":\"hi\"}}";

    static bool Refuses(Func<string, object> decode, string text)
    {
        try { decode(text); return false; }
        catch (ContractException) { return true; }
    }

    public static int Main()
    {
        Func<string, object> kernel = t => Kernel.Sdk.Kernel.Channels.DecodeControlMessage(t);
        Func<string, object> rukh = t => Rukh.Sdk.Rukh.Channels.DecodeIpcMessage(t, null);
        kernel(Ping);
        rukh(Log);
        if (!Refuses(kernel, Log) || !Refuses(rukh, Ping))
        {
            Console.Error.WriteLine("FAIL: an SDK accepted another contract's message");
            return 1;
        }
        var runtime = typeof(ContractException).Assembly.GetName();
        var k = typeof(Kernel.Sdk.Kernel.Channels).Assembly.GetName();
        var r = typeof(Rukh.Sdk.Rukh.Channels).Assembly.GetName();
        Console.WriteLine("side by side: " + k.Name + ", " + r.Name + " over " + runtime.Name + ": ok");
        return 0;
    }
}
