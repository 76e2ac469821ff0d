//! A plain JSON Schema document read as a types-only contract.
//!
//! Teams often start from a published schema (MCP's, CloudEvents', a vendor's) rather than
//! a contract. Such a document becomes a contract with no parties, channels or methods whose
//! `$defs` are the schema's definitions (`$defs` and draft-07 `definitions` alike) plus its
//! root, when the root describes a value. References are rewritten to `#/$defs/…`, so the
//! generators, the vectors and the checks see one kind of pointer. Nothing else of the
//! schema changes: its keywords are validated as the contract's `$defs` always are.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// Keywords that make a document's root describe a value (rather than only hold definitions).
const VALUE_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "oneOf",
    "anyOf",
    "allOf",
    "$ref",
    "enum",
    "const",
    "items",
];

/// Whether `doc` is a plain JSON Schema rather than a contract: it has none of a contract's
/// parties, channels or methods, and it declares a JSON Schema dialect or holds definitions.
pub fn is_plain_schema(doc: &Value) -> bool {
    let Some(o) = doc.as_object() else {
        return false;
    };
    if ["parties", "channels", "methods"]
        .iter()
        .any(|k| o.contains_key(*k))
    {
        return false;
    }
    let dialect = o
        .get("$schema")
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("json-schema.org"));
    dialect || o.contains_key("$defs") || o.contains_key("definitions")
}

/// The contract a plain schema stands for. `stem` is its file's name without the
/// extension; it names the contract (lower-case, dashes) and, without a `title`, the root type.
pub fn contract_of(stem: &str, doc: &Value) -> Value {
    contract_with(stem, doc, &Resources::default())
}

/// `doc` as a contract: a plain schema read as one ([`contract_with`], named after the file
/// stem of `origin`), any other document as it is.
pub fn as_contract(origin: &str, doc: Value, resources: &Resources) -> Value {
    if !is_plain_schema(&doc) {
        return doc;
    }
    let stem = std::path::Path::new(origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    contract_with(&stem, &doc, resources)
}

/// [`contract_of`], with the documents its references outside itself name brought in from
/// `resources`: each one's definitions and root become `$defs` entries of their own (renamed
/// where a name is taken), and every reference to it points there. A reference to a document
/// `resources` does not hold is left as it is, for the checks to report.
pub fn contract_with(stem: &str, doc: &Value, resources: &Resources) -> Value {
    let name = contract_name(stem);
    let title = doc.get("title").and_then(Value::as_str);
    let bundle = Bundle::new(stem, doc, resources);
    let mut defs = Map::new();
    bundle.place(&bundle.main, doc, &mut defs);
    for (placed, d) in bundle.external.values() {
        bundle.place(placed, d, &mut defs);
    }
    json!({
        "$schema": "contract.schema.json",
        "name": name,
        "title": title.unwrap_or(stem),
        "version": "0.0.0",
        "source": format!("none: the plain JSON Schema {stem}, read as a types-only contract"),
        "description": doc.get("description").and_then(Value::as_str).unwrap_or(""),
        "parties": {},
        "channels": {},
        "methods": {},
        "notes": [],
        "$defs": defs,
    })
}

/// The documents a plain schema's references outside itself may name, by URI: a document's
/// own `$id`, or the URI a user gives (`contractgen --resource`). Nothing is fetched.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    docs: BTreeMap<String, Value>,
}

impl Resources {
    /// Hold `doc` as the document `uri` names (its fragment and a trailing `/` aside).
    pub fn insert(&mut self, uri: &str, doc: Value) {
        self.docs.insert(base(uri), doc);
    }

    /// Hold `doc` under its own `$id`; `false` (and nothing held) when it has none.
    pub fn insert_by_id(&mut self, doc: Value) -> bool {
        let Some(id) = doc.get("$id").and_then(Value::as_str).map(base) else {
            return false;
        };
        self.docs.insert(id, doc);
        true
    }

    /// The files of `given`, each held as its URI names it or, without one, by its own `$id`.
    pub fn read<'a>(
        given: impl IntoIterator<Item = (Option<&'a str>, &'a std::path::Path)>,
    ) -> Result<Resources, crate::LoadError> {
        let mut res = Resources::default();
        for (uri, path) in given {
            res.insert_file(uri, path)?;
        }
        Ok(res)
    }

    /// Read `path` and hold it as `uri` names it or, without one, under its own `$id`.
    pub fn insert_file(
        &mut self,
        uri: Option<&str>,
        path: &std::path::Path,
    ) -> Result<(), crate::LoadError> {
        let (origin, text) = crate::read_text(path)?;
        let doc = crate::parse(&origin, &text)?;
        match uri {
            Some(u) => self.insert(u, doc),
            None if self.insert_by_id(doc) => {}
            None => return Err(crate::LoadError::ResourceWithoutId { path: origin }),
        }
        Ok(())
    }
}

/// A URI without its fragment and trailing `/`: `https://x/` and `https://x#` name `https://x`.
fn base(uri: &str) -> String {
    let u = uri.split('#').next().unwrap_or(uri);
    u.trim_end_matches('/').to_string()
}

/// One document's place in the contract: the `$defs` key of its root and of each definition.
struct Placed {
    root: String,
    defs: BTreeMap<String, String>,
}

/// The main document and every document its references reach, each placed.
struct Bundle<'a> {
    main: Placed,
    main_id: Option<String>,
    external: BTreeMap<String, (Placed, &'a Value)>,
}

impl<'a> Bundle<'a> {
    fn new(stem: &str, doc: &'a Value, resources: &'a Resources) -> Bundle<'a> {
        let mut taken: Vec<String> = Vec::new();
        let main = placed(doc, stem, &mut taken);
        let mut bundle = Bundle {
            main,
            main_id: doc.get("$id").and_then(Value::as_str).map(base),
            external: BTreeMap::new(),
        };
        let mut todo = external_bases(doc);
        while let Some(b) = todo.pop() {
            if bundle.external.contains_key(&b) || bundle.main_id.as_deref() == Some(&b) {
                continue;
            }
            let Some(d) = resources.docs.get(&b) else {
                continue;
            };
            let stem = b.rsplit('/').next().unwrap_or("Resource").to_string();
            bundle.external.insert(b, (placed(d, &stem, &mut taken), d));
            todo.extend(external_bases(d));
        }
        bundle
    }

    /// `doc`'s definitions and root, rewritten, under their keys.
    fn place(&self, p: &Placed, doc: &Value, defs: &mut Map<String, Value>) {
        for key in ["definitions", "$defs"] {
            if let Some(Value::Object(d)) = doc.get(key) {
                for (k, v) in d {
                    let at = p.defs.get(k).cloned().unwrap_or_else(|| k.clone());
                    defs.insert(at, self.rewrite(v, p, false));
                }
            }
        }
        let describes_value = doc
            .as_object()
            .is_some_and(|o| VALUE_KEYWORDS.iter().any(|k| o.contains_key(*k)));
        if describes_value {
            let mut r = doc.clone();
            if let Some(o) = r.as_object_mut() {
                for k in ["$schema", "$id", "definitions", "$defs"] {
                    o.remove(k);
                }
            }
            defs.insert(p.root.clone(), self.rewrite(&r, p, false));
        }
    }

    /// Every `$ref` made a `#/$defs/…` pointer; data (`examples`, `enum`, …) stays as it is.
    fn rewrite(&self, v: &Value, p: &Placed, names: bool) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| {
                        let x = match (k.as_str(), x) {
                            ("$ref", Value::String(r)) if !names => {
                                Value::String(self.pointer(r, p))
                            }
                            _ if crate::pointer::holds_data(k, names) => x.clone(),
                            _ => self.rewrite(x, p, crate::pointer::names_below(k, names)),
                        };
                        (k.clone(), x)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.rewrite(x, p, false)).collect()),
            other => other.clone(),
        }
    }

    /// Where reference `r`, made in the document placed as `p`, points in the contract.
    fn pointer(&self, r: &str, p: &Placed) -> String {
        let (uri, frag) = r.split_once('#').unwrap_or((r, ""));
        if uri.is_empty() {
            return local(frag, p).unwrap_or_else(|| r.to_string());
        }
        let b = base(uri);
        let target = match self.external.get(&b) {
            Some((q, _)) => q,
            None if self.main_id.as_deref() == Some(&b) => &self.main,
            None => return r.to_string(),
        };
        local(frag, target).unwrap_or_else(|| r.to_string())
    }
}

/// `doc` placed: its root named by its title (or `stem`), its definitions by their keys, each
/// made unique against `taken` (and then taken).
fn placed(doc: &Value, stem: &str, taken: &mut Vec<String>) -> Placed {
    let title = doc.get("title").and_then(Value::as_str);
    let keys: Vec<String> = ["definitions", "$defs"]
        .iter()
        .filter_map(|d| doc.get(*d).and_then(Value::as_object))
        .flat_map(|o| o.keys().cloned())
        .collect();
    let mut root = root_name(title.unwrap_or(stem));
    while taken.contains(&root) || keys.contains(&root) {
        root.push_str("Document");
    }
    taken.push(root.clone());
    let mut defs = BTreeMap::new();
    for k in keys {
        let mut at = k.clone();
        while taken.contains(&at) {
            at = format!("{root}{at}");
        }
        taken.push(at.clone());
        defs.insert(k, at);
    }
    Placed { root, defs }
}

/// A fragment (`/definitions/X/…`, `/properties/x`, empty for the root) of the document
/// placed as `p`, as a contract pointer; `None` for a plain-name anchor.
fn local(frag: &str, p: &Placed) -> Option<String> {
    let root = crate::escape_pointer(&p.root);
    if frag.is_empty() || frag == "/" {
        return Some(format!("#/$defs/{root}"));
    }
    for prefix in ["/definitions/", "/$defs/"] {
        if let Some(rest) = frag.strip_prefix(prefix) {
            let (token, tail) = rest.split_once('/').map_or((rest, ""), |(t, r)| (t, r));
            let name = crate::pointer::unescape(token);
            let at = p
                .defs
                .get(&name)
                .map_or(token.to_string(), |k| crate::escape_pointer(k));
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!("/{tail}")
            };
            return Some(format!("#/$defs/{at}{tail}"));
        }
    }
    // Anywhere else in the document (`#/properties/x`): below the root's own entry.
    frag.starts_with('/')
        .then(|| format!("#/$defs/{root}{frag}"))
}

/// The documents outside `doc` its references name (their bases), data aside.
fn external_bases(doc: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, r) in crate::pointer::references(doc) {
        let uri = r.split('#').next().unwrap_or_default();
        if !uri.is_empty() && !out.contains(&base(uri)) {
            out.push(base(uri));
        }
    }
    out
}

/// `My Schema_v2` → `my-schema-v2`: the contract-name pattern `^[a-z][a-z0-9-]*$`.
fn contract_name(stem: &str) -> String {
    let mut out = String::new();
    for c in stem.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_string();
    match out.chars().next() {
        Some(c) if c.is_ascii_lowercase() => out,
        _ => format!("schema-{out}").trim_end_matches('-').to_string(),
    }
}

/// The root type's `$defs` key: its title (or file stem) with only letters and digits kept,
/// each word starting upper-case so the words stay apart when a target case-converts it
/// ("JSON schema for X" → `JSONSchemaForX` → `JsonSchemaForX`, not `JsoNschemaforX`).
fn root_name(title: &str) -> String {
    let kept: String = title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(|w| {
            let mut cs = w.chars();
            cs.next()
                .map(|f| f.to_ascii_uppercase())
                .into_iter()
                .chain(cs)
        })
        .collect();
    if kept.is_empty() { "Root".into() } else { kept }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_07_schema_becomes_a_types_only_contract() {
        let doc = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Geo JSON",
            "type": "object",
            "properties": {
                "child": {"$ref": "#"},
                "p": {"$ref": "#/definitions/Point"},
                "q": {"$ref": "#/properties/p"}
            },
            "definitions": {"Point": {"type": "array", "items": {"type": "number"}}}
        });
        assert!(is_plain_schema(&doc));
        let c = contract_of("geo_json", &doc);
        assert_eq!(c["name"], "geo-json");
        assert_eq!(c["$defs"]["Point"]["items"]["type"], "number");
        assert_eq!(
            c["$defs"]["GeoJSON"]["properties"]["child"]["$ref"],
            "#/$defs/GeoJSON"
        );
        assert_eq!(
            c["$defs"]["GeoJSON"]["properties"]["p"]["$ref"],
            "#/$defs/Point"
        );
        assert_eq!(
            c["$defs"]["GeoJSON"]["properties"]["q"]["$ref"],
            "#/$defs/GeoJSON/properties/p"
        );
        assert!(c["$defs"]["GeoJSON"].get("definitions").is_none());
    }

    #[test]
    fn a_document_a_reference_leaves_for_is_brought_in_from_the_resources() {
        let meta = json!({
            "$id": "https://meta.example/",
            "title": "Schema",
            "oneOf": [{"$ref": "#/definitions/Object"}, {"type": "boolean"}],
            "definitions": {
                "Object": {"properties": {"not": {"$ref": "#"}, "x": {"$ref": "#/definitions/Point"}}},
                "Point": {"type": "integer"}
            }
        });
        let doc = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Doc",
            "properties": {
                "schema": {"$ref": "https://meta.example"},
                "object": {"$ref": "https://meta.example/#/definitions/Object"},
                "$ref": {"type": "string"}
            },
            "examples": [{"$ref": "#/stays"}],
            "definitions": {"Point": {"type": "string"}}
        });
        let mut res = Resources::default();
        assert!(res.insert_by_id(meta));
        let c = contract_with("doc", &doc, &res);
        let d = &c["$defs"];
        assert_eq!(d["Doc"]["properties"]["schema"]["$ref"], "#/$defs/Schema");
        assert_eq!(d["Doc"]["properties"]["object"]["$ref"], "#/$defs/Object");
        assert_eq!(d["Doc"]["properties"]["$ref"], json!({"type": "string"}));
        assert_eq!(d["Doc"]["examples"][0]["$ref"], "#/stays");
        // The resource's Point is renamed apart from the document's own.
        assert_eq!(d["Point"]["type"], "string");
        assert_eq!(d["SchemaPoint"]["type"], "integer");
        assert_eq!(
            d["Object"]["properties"]["x"]["$ref"],
            "#/$defs/SchemaPoint"
        );
        assert_eq!(d["Object"]["properties"]["not"]["$ref"], "#/$defs/Schema");
        assert_eq!(d["Schema"]["oneOf"][0]["$ref"], "#/$defs/Object");
        // Without the resource the reference is left for the checks to report.
        let bare = contract_of("doc", &doc);
        assert_eq!(
            bare["$defs"]["Doc"]["properties"]["schema"]["$ref"],
            "https://meta.example"
        );
    }

    #[test]
    fn a_contract_is_not_a_plain_schema() {
        assert!(!is_plain_schema(
            &json!({"$schema": "x", "parties": {}, "$defs": {}})
        ));
        assert!(!is_plain_schema(&json!({"name": "x"})));
        assert!(!is_plain_schema(&json!([1])));
    }

    #[test]
    fn names_fit_the_contract_pattern() {
        assert_eq!(contract_name("MCP 2025-06-18"), "mcp-2025-06-18");
        assert_eq!(contract_name("2025"), "schema-2025");
        assert_eq!(root_name("Geo JSON"), "GeoJSON");
        assert_eq!(
            root_name("JSON schema for Bukkit Plugin YAML"),
            "JSONSchemaForBukkitPluginYAML"
        );
        assert_eq!(root_name("--"), "Root");
    }
}
