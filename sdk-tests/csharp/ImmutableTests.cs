// The generated types are immutable values: get-only public properties, set by one public
// constructor (required members first, optional ones defaulting to absent) or by the decoder.
// Every valid vector is rebuilt through that constructor from the decoded value's own
// properties and must encode to the same JSON; a value the contract refuses cannot be built.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Text.Json;
using System.Text.Json.Serialization;
using Contract.Runtime;

public static partial class Tests
{
    // A generated struct: the classes with a decoder hook (unions and wrappers have none).
    static bool IsStruct(System.Type t)
    {
        return t.IsClass && typeof(IJsonOnDeserialized).IsAssignableFrom(t);
    }

    static ConstructorInfo PublicCtor(System.Type t)
    {
        var ctors = t.GetConstructors(BindingFlags.Public | BindingFlags.Instance);
        return ctors.Length == 1 ? ctors[0] : null;
    }

    // An optional member that was given as null cannot be said through the constructor
    // (null there means absent): such a value is not rebuilt.
    static bool HasGivenNull(object v)
    {
        var given = v as IGivenMembers;
        if (given == null) return false;
        foreach (var p in v.GetType().GetProperties(BindingFlags.Public | BindingFlags.Instance))
        {
            var wire = p.GetCustomAttribute<JsonPropertyNameAttribute>();
            if (wire != null && p.GetValue(v) == null && given.Given(wire.Name)) return true;
        }
        return false;
    }

    /// <summary>Builds <paramref name="decoded"/> again through its public constructor.</summary>
    static object Rebuild(object decoded)
    {
        var t = decoded.GetType();
        var ctor = PublicCtor(t);
        var args = ctor.GetParameters().Select(p =>
        {
            string prop = char.ToUpperInvariant(p.Name[0]) + p.Name.Substring(1);
            var pi = t.GetProperty(prop, BindingFlags.Public | BindingFlags.Instance);
            if (pi == null) throw new InvalidOperationException("parameter " + p.Name + " of " + t.Name + " has no property " + prop);
            return pi.GetValue(decoded);
        }).ToArray();
        return ctor.Invoke(args);
    }

    /// <summary>The decoded <paramref name="decoded"/> (encoded as <paramref name="encoded"/>), rebuilt through its constructor, encodes the same.</summary>
    static void Rebuilds(string id, object decoded, string encoded)
    {
        var t = decoded.GetType();
        if (!IsStruct(t) || HasGivenNull(decoded)) return;
        if (PublicCtor(t) == null)
        {
            Fail(id + "#ctor", t.Name + " has no single public constructor");
            return;
        }
        try
        {
            string again = Codec.Encode(Rebuild(decoded), t);
            using (var a = JsonDocument.Parse(encoded))
            using (var b = JsonDocument.Parse(again))
            {
                Expect(Json.SemanticEquals(a.RootElement, b.RootElement), id + "#ctor",
                       t.Name + " built by its constructor encodes differently:\n  decoded: " + encoded + "\n  built:   " + again);
            }
        }
        catch (Exception e)
        {
            e = Unwrap(e);
            Fail(id + "#ctor", t.Name + " refused its own members: " + e.GetType().Name + ": " + e.Message);
        }
    }

    /// <summary>No generated type of <paramref name="module"/> (values, unions, machines, tables) can be changed after it is built.</summary>
    static void Immutable(string module)
    {
        string ns = "Contract.Sdk." + Pascal(module);
        foreach (var t in Sdk.GetTypes().Where(x => x.Namespace == ns && x.IsClass && !x.IsNested))
        {
            var open = t.GetProperties(BindingFlags.Public | BindingFlags.Instance)
                .Where(p => p.SetMethod != null && p.SetMethod.IsPublic).Select(p => p.Name);
            var fields = t.GetFields(BindingFlags.Public | BindingFlags.Instance).Select(f => f.Name);
            var bits = t.GetMembers(BindingFlags.Public | BindingFlags.Instance)
                .Where(m => m.Name.StartsWith("_") || m.Name == "HasAllRequired").Select(m => m.Name);
            var loose = open.Concat(fields).Concat(bits).ToList();
            Expect(loose.Count == 0, module + "/immutable/" + t.Name, "public members that change or expose its state: " + string.Join(", ", loose));
        }
    }

    static void RefusedByCtor(string id, string module, string typeName, Func<System.Type, object> build, string label)
    {
        var types = TypesOf(module);
        if (types == null) return;
        try
        {
            build(types[typeName]);
            Fail("ctor/" + id, typeName + " was built");
        }
        catch (Exception e)
        {
            var c = Unwrap(e) as ContractException;
            Expect(c != null && c.Label == label, "ctor/" + id, "expected " + label + ", got " + Unwrap(e).GetType().Name + ": " + Unwrap(e).Message);
        }
    }

    static object Build(System.Type t, params object[] args)
    {
        var ctor = PublicCtor(t);
        var all = ctor.GetParameters().Select((p, i) => i < args.Length ? args[i] : p.DefaultValue).ToArray();
        return ctor.Invoke(all);
    }

    /// <summary>The constructor holds a value to the contract as the decoder does; an omitted optional member is absent.</summary>
    static void Constructors(List<string> modules)
    {
        if (modules.Contains("kernel"))
        {
            var types = TypesOf("kernel");
            var cancel = Build(types["TaskCancelParams"], "t-1");
            Expect(Codec.Encode(cancel, types["TaskCancelParams"]) == "{\"task_id\":\"t-1\"}", "ctor/kernel/optional-absent",
                   "TaskCancelParams(\"t-1\") encodes as " + Codec.Encode(cancel, types["TaskCancelParams"]));
            RefusedByCtor("kernel/null-required", "kernel", "TaskCancelParams", t => Build(t, new object[] { null }), Labels.WrongType);
            RefusedByCtor("kernel/stream-id-range", "kernel", "CommandHandleResult", t => Build(t, null, 4294967296L), Labels.OutOfRange);
        }
    }
}
