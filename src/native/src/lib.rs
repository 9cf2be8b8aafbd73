//! The plain pods and WorkloadEndpoints of a JSON file, read in one pass over its text.
//!
//! `read_list` takes a JSON List (or a top-level array) and gives each item either the tuple
//! `plain_pod_fields` (a v1 Pod) or `plain_fields` (a v3 WorkloadEndpoint) would give for it,
//! or its own text where it cannot be sure of that (any other kind, a field or value outside
//! the common case, an escape it does not decode); the caller then takes its Python path for
//! that item. It never accepts what the Python path refuses: every check is the same or
//! stricter, and any doubt declines. Text that is not JSON as Python's parser reads it (or
//! that this reader does not follow, such as `NaN`) gives None for the whole file.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicIsize, Ordering};

/// A multiply-rotate hash (as rustc's own maps use), its result mixed once more: the keys
/// here are short field names and label strings, which SipHash hashes several times slower.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u8(&mut self, byte: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits, which pick the bucket, poorly mixed: mix them in.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
}

type FxSet<T> = HashSet<T, BuildHasherDefault<Fx>>;
type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// How many interned strings a reader keeps at most (label keys and values, namespaces,
/// nodes, accounts: a cluster has few; beyond this the cache starts again).
const INTERNED_MAX: usize = 1 << 16;

/// Deeper than this, a file is left to the Python path (which has its own limit).
const MAX_DEPTH: u32 = 128;

#[derive(Debug)]
enum Fail {
    /// Not JSON (or not JSON this reader follows): the whole file goes to the Python path.
    Invalid,
    /// Valid so far, but not a plain pod this reader vouches for: the item's text is given.
    Decline,
}

type R<T> = Result<T, Fail>;

struct Scanner<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    depth: u32,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if c == b' ' || c == b'\t' || c == b'\n' || c == b'\r' {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> R<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(Fail::Invalid)
        }
    }

    fn literal(&mut self, word: &[u8]) -> R<()> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Fail::Invalid)
        }
    }

    fn hex4(&mut self) -> R<u32> {
        let digits = self.b.get(self.i..self.i + 4).ok_or(Fail::Invalid)?;
        let mut value = 0u32;
        for &d in digits {
            value = value * 16 + (d as char).to_digit(16).ok_or(Fail::Invalid)?;
        }
        self.i += 4;
        Ok(value)
    }

    /// Steps over a string's bytes up to the next quote, backslash or control character,
    /// eight at a time.
    fn plain_run(&mut self) {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGHS: u64 = 0x8080_8080_8080_8080;
        let b = self.b;
        while self.i + 8 <= b.len() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&b[self.i..self.i + 8]);
            let x = u64::from_le_bytes(word);
            let quote = x ^ (ONES * u64::from(b'"'));
            let backslash = x ^ (ONES * u64::from(b'\\'));
            let found = (quote.wrapping_sub(ONES) & !quote)
                | (backslash.wrapping_sub(ONES) & !backslash)
                | (x.wrapping_sub(ONES * 0x20) & !x);
            let found = found & HIGHS;
            if found != 0 {
                self.i += (found.trailing_zeros() / 8) as usize;
                return;
            }
            self.i += 8;
        }
    }

    /// A string, decoded (`decode`) or only checked. A lone surrogate, which Python's parser
    /// takes and Rust's strings cannot hold, declines when decoding.
    fn string(&mut self, decode: bool) -> R<Cow<'a, str>> {
        if self.peek() != Some(b'"') {
            return Err(Fail::Invalid);
        }
        self.i += 1;
        let start = self.i;
        let mut owned: Option<String> = None;
        let mut run = start;
        loop {
            self.plain_run();
            let c = *self.b.get(self.i).ok_or(Fail::Invalid)?;
            match c {
                b'"' => {
                    let end = self.i;
                    self.i += 1;
                    return Ok(match owned {
                        None => Cow::Borrowed(&self.s[start..end]),
                        Some(mut text) => {
                            text.push_str(&self.s[run..end]);
                            Cow::Owned(text)
                        }
                    });
                }
                b'\\' => {
                    let text = owned.get_or_insert_with(String::new);
                    text.push_str(&self.s[run..self.i]);
                    self.i += 1;
                    let e = *self.b.get(self.i).ok_or(Fail::Invalid)?;
                    self.i += 1;
                    match e {
                        b'"' => text.push('"'),
                        b'\\' => text.push('\\'),
                        b'/' => text.push('/'),
                        b'b' => text.push('\u{8}'),
                        b'f' => text.push('\u{c}'),
                        b'n' => text.push('\n'),
                        b'r' => text.push('\r'),
                        b't' => text.push('\t'),
                        b'u' => {
                            let first = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&first)
                                && self.b[self.i..].starts_with(b"\\u")
                            {
                                let save = self.i;
                                self.i += 2;
                                let second = self.hex4()?;
                                if (0xDC00..0xE000).contains(&second) {
                                    0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                                } else {
                                    self.i = save;
                                    first
                                }
                            } else {
                                first
                            };
                            match char::from_u32(code) {
                                Some(ch) => text.push(ch),
                                None if decode => return Err(Fail::Decline),
                                None => {}
                            }
                        }
                        _ => return Err(Fail::Invalid),
                    }
                    run = self.i;
                }
                0..=0x1f => return Err(Fail::Invalid),
                _ => self.i += 1,
            }
        }
    }

    /// A number's text; whether it is an integer (no fraction, no exponent).
    fn number(&mut self) -> R<(&'a str, bool)> {
        self.ws();
        let start = self.i;
        let b = self.b;
        if b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(b.get(self.i), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return Err(Fail::Invalid),
        }
        let mut integer = true;
        if b.get(self.i) == Some(&b'.') {
            integer = false;
            self.i += 1;
            if !matches!(b.get(self.i), Some(b'0'..=b'9')) {
                return Err(Fail::Invalid);
            }
            while matches!(b.get(self.i), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        if matches!(b.get(self.i), Some(b'e' | b'E')) {
            integer = false;
            self.i += 1;
            if matches!(b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(b.get(self.i), Some(b'0'..=b'9')) {
                return Err(Fail::Invalid);
            }
            while matches!(b.get(self.i), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        Ok((&self.s[start..self.i], integer))
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Fail::Invalid);
        }
        Ok(())
    }

    /// Any value, checked and stepped over.
    fn skip(&mut self) -> R<()> {
        match self.peek().ok_or(Fail::Invalid)? {
            b'{' => self.members(false, |s, _| s.skip())?,
            b'[' => self.array(Self::skip)?,
            b'"' => {
                self.string(false)?;
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            _ => {
                self.number()?;
            }
        }
        Ok(())
    }

    /// An object's members, each key handed to `member` with the scanner before its value
    /// (which `member` must consume). Anything but an object declines.
    fn object(&mut self, member: impl FnMut(&mut Self, Cow<'a, str>) -> R<()>) -> R<()> {
        self.members(true, member)
    }

    /// ``object``, its keys decoded (``decode``) or only checked.
    fn members(
        &mut self,
        decode: bool,
        mut member: impl FnMut(&mut Self, Cow<'a, str>) -> R<()>,
    ) -> R<()> {
        self.sequence(b'{', b'}', |s| {
            let key = s.string(decode)?;
            s.eat(b':')?;
            member(s, key)
        })
    }

    /// An array's items, each read by `item`. Anything but an array declines.
    fn array(&mut self, item: impl FnMut(&mut Self) -> R<()>) -> R<()> {
        self.sequence(b'[', b']', item)
    }

    /// What an object and an array share: `open`, entries read by `entry` and separated by
    /// commas, `close`; anything but `open` first declines.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut entry: impl FnMut(&mut Self) -> R<()>,
    ) -> R<()> {
        if self.peek() != Some(open) {
            return Err(Fail::Decline);
        }
        self.enter()?;
        self.i += 1;
        if self.peek() == Some(close) {
            self.i += 1;
        } else {
            loop {
                entry(self)?;
                match self.peek() {
                    Some(b',') => self.i += 1,
                    Some(c) if c == close => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err(Fail::Invalid),
                }
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// An integer's text (any other value declines: JSON's reader makes a float of a
    /// fraction or an exponent).
    fn integer(&mut self) -> R<&'a str> {
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            return Err(Fail::Decline);
        }
        match self.number()? {
            (digits, true) => Ok(digits),
            _ => Err(Fail::Decline),
        }
    }

    /// A string value (anything else declines).
    fn text(&mut self) -> R<Cow<'a, str>> {
        if self.peek() != Some(b'"') {
            return Err(Fail::Decline);
        }
        self.string(true)
    }

    /// A string-to-string map, its keys once each.
    fn map(&mut self) -> R<Vec<(Cow<'a, str>, Cow<'a, str>)>> {
        let mut out: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::new();
        let mut seen: FxSet<Cow<'a, str>> = FxSet::default();
        self.object(|s, key| {
            if !seen.insert(key.clone()) {
                return Err(Fail::Decline);
            }
            let value = s.text()?;
            out.push((key, value));
            Ok(())
        })?;
        Ok(out)
    }
}

/// The field names the Python side knows and does not read, and the rest of its constants.
#[pyclass(frozen)]
struct PlainReader {
    metadata_strings: Vec<String>,
    /// A WorkloadEndpoint's string metadata fields (``plain_workloads.METADATA_STRINGS``).
    endpoint_metadata_strings: Vec<String>,
    /// The spec strings ``checked_fields`` reads, in its order of ``names``
    /// (``plain_workloads.SPEC_STRINGS``).
    endpoint_strings: Vec<String>,
    /// The spec strings nobody reads (``plain_workloads.SPEC_UNREAD_STRINGS``).
    endpoint_unread_strings: Vec<String>,
    spec_unread: FxSet<String>,
    status_unread: FxSet<String>,
    container_unread: FxSet<String>,
    special_annotations: FxSet<String>,
    address_annotations: Vec<(String, bool)>,
    finished_phases: FxSet<String>,
    interned: RefCell<FxMap<String, Py<PyString>>>,
}

#[derive(Default)]
struct Port<'a> {
    number: Option<i64>,
    name: Cow<'a, str>,
    protocol: Cow<'a, str>,
}

/// What an item's text gave: a pod's fields, or (with ``endpoint``) a WorkloadEndpoint's,
/// each borrowed from the text where it needed no unescaping.
#[derive(Default)]
struct Pod<'a> {
    kind: Option<Cow<'a, str>>,
    api_version: Option<Cow<'a, str>>,
    meta: Meta<'a>,
    node: Cow<'a, str>,
    account: Cow<'a, str>,
    phase: Cow<'a, str>,
    pod_ip: Cow<'a, str>,
    pod_ips: Vec<Cow<'a, str>>,
    ports: Vec<Port<'a>>,
    init_ports: Vec<Port<'a>>,
    /// A WorkloadEndpoint's spec, where the kind is one (its metadata is ``meta``).
    endpoint: Option<Endpoint<'a>>,
}

#[derive(Default)]
struct Endpoint<'a> {
    strings: [Cow<'a, str>; 8],
    networks: Vec<Cow<'a, str>>,
    profiles: Vec<Cow<'a, str>>,
}

/// The metadata both kinds read.
#[derive(Default)]
struct Meta<'a> {
    name: Cow<'a, str>,
    namespace: Cow<'a, str>,
    resource_version: Cow<'a, str>,
    labels: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    annotations: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

/// An item's metadata: the name, (``namespaced``) namespace, resourceVersion, labels and
/// annotations read, the other string fields (``strings``) checked and stepped over, and
/// (``pod``) a pod's ownerReferences an array of objects of scalars and its generation an
/// integer, both stepped over, and (``listed``) the managedFields an API server's listing
/// holds, whatever they are.
fn metadata<'a>(
    s: &mut Scanner<'a>,
    meta: &mut Meta<'a>,
    strings: impl Fn(&str) -> bool,
    pod: bool,
    listed: bool,
    namespaced: bool,
) -> R<()> {
    let mut seen = 0u32;
    s.object(|s, key| match key.as_ref() {
        "name" => text_once(s, &mut seen, 1, &mut meta.name),
        "namespace" if namespaced => text_once(s, &mut seen, 2, &mut meta.namespace),
        "labels" => {
            once(&mut seen, 4)?;
            meta.labels = s.map()?;
            Ok(())
        }
        "annotations" => {
            once(&mut seen, 8)?;
            meta.annotations = s.map()?;
            Ok(())
        }
        "ownerReferences" if pod => {
            if s.peek() != Some(b'[') {
                return Err(Fail::Decline);
            }
            s.array(|s| {
                s.members(false, |s, _| {
                    if matches!(s.peek(), Some(b'{' | b'[')) {
                        return Err(Fail::Decline);
                    }
                    s.skip()
                })
            })
        }
        "generation" if pod => s.integer().map(drop),
        "managedFields" if listed => s.skip(),
        "resourceVersion" if strings("resourceVersion") => {
            meta.resource_version = s.text()?;
            Ok(())
        }
        other if strings(other) => s.text().map(drop),
        _ => Err(Fail::Decline),
    })
}

/// An object holding at most ``name``, once, its value read by ``read``.
fn only_field<'a>(
    s: &mut Scanner<'a>,
    name: &str,
    mut read: impl FnMut(&mut Scanner<'a>) -> R<()>,
) -> R<()> {
    let mut seen = 0u32;
    s.object(|s, key| {
        if key != name {
            return Err(Fail::Decline);
        }
        once(&mut seen, 1)?;
        read(s)
    })
}

/// The bookkeeping strings of a namespace's and a service account's metadata.
fn bookkeeping(key: &str) -> bool {
    matches!(key, "uid" | "resourceVersion" | "creationTimestamp")
}

/// The kind of the items of an API server's listing (which name none).
#[derive(Clone, Copy, PartialEq)]
enum Listing {
    Pod,
    Namespace,
    ServiceAccount,
}

/// A read string field, once (``once``).
fn text_once<'a>(s: &mut Scanner<'a>, seen: &mut u32, bit: u32, out: &mut Cow<'a, str>) -> R<()> {
    once(seen, bit)?;
    *out = s.text()?;
    Ok(())
}

/// Marks a read field as seen; a second one declines (Python's parser keeps the last).
fn once(seen: &mut u32, bit: u32) -> R<()> {
    if *seen & bit != 0 {
        return Err(Fail::Decline);
    }
    *seen |= bit;
    Ok(())
}

impl PlainReader {
    fn ports<'a>(&self, s: &mut Scanner<'a>, out: &mut Vec<Port<'a>>) -> R<()> {
        s.array(|s| {
            let mut seen = 0u32;
            s.object(|s, key| match key.as_ref() {
                "name" => {
                    once(&mut seen, 1)?;
                    s.text().map(drop)
                }
                "ports" => {
                    once(&mut seen, 2)?;
                    s.array(|s| {
                        let mut port = Port::default();
                        let mut seen = 0u32;
                        s.object(|s, key| match key.as_ref() {
                            "containerPort" => {
                                once(&mut seen, 1)?;
                                let digits = s.integer()?;
                                if digits.len() > 6 {
                                    return Err(Fail::Decline);
                                }
                                port.number = Some(digits.parse().map_err(|_| Fail::Decline)?);
                                Ok(())
                            }
                            "name" => text_once(s, &mut seen, 2, &mut port.name),
                            "protocol" => text_once(s, &mut seen, 4, &mut port.protocol),
                            _ => Err(Fail::Decline),
                        })?;
                        out.push(port);
                        Ok(())
                    })
                }
                other if self.container_unread.contains(other) => s.skip(),
                _ => Err(Fail::Decline),
            })
        })
    }

    /// An item's fields; ``listed``: an item of an API server's listing, a v1 Pod where it
    /// names neither its kind nor its apiVersion (as listed items do not).
    fn pod<'a>(&self, s: &mut Scanner<'a>, listed: bool) -> R<Pod<'a>> {
        let mut pod = Pod::default();
        let mut seen = 0u32;
        s.object(|s, key| match key.as_ref() {
            "kind" => {
                once(&mut seen, 1)?;
                let kind = s.text()?;
                if kind == "WorkloadEndpoint" && seen & 28 == 0 {
                    pod.endpoint = Some(Endpoint::default());
                } else if kind != "Pod" {
                    return Err(Fail::Decline); // or an endpoint's kind after its fields
                }
                pod.kind = Some(kind);
                Ok(())
            }
            "metadata" if pod.endpoint.is_some() => {
                once(&mut seen, 4)?;
                let strings = |k: &str| self.endpoint_metadata_strings.iter().any(|m| m == k);
                metadata(s, &mut pod.meta, strings, false, false, true)
            }
            "spec" if pod.endpoint.is_some() => {
                once(&mut seen, 8)?;
                let endpoint = pod.endpoint.as_mut().ok_or(Fail::Decline)?;
                let mut seen = 0u32;
                s.object(|s, key| {
                    let key = key.as_ref();
                    if let Some(at) = self.endpoint_strings.iter().position(|k| k == key) {
                        once(&mut seen, 1 << at)?;
                        endpoint.strings[at] = s.text()?;
                        return Ok(());
                    }
                    match key {
                        other if self.endpoint_unread_strings.iter().any(|k| k == other) => {
                            s.text().map(drop)
                        }
                        "ipNetworks" => {
                            once(&mut seen, 1 << 8)?;
                            s.array(|s| {
                                endpoint.networks.push(s.text()?);
                                Ok(())
                            })
                        }
                        "profiles" => {
                            once(&mut seen, 1 << 9)?;
                            s.array(|s| {
                                endpoint.profiles.push(s.text()?);
                                Ok(())
                            })
                        }
                        _ => Err(Fail::Decline),
                    }
                })
            }
            "apiVersion" => {
                once(&mut seen, 2)?;
                pod.api_version = Some(s.text()?);
                Ok(())
            }
            "metadata" => {
                once(&mut seen, 4)?;
                let strings = |k: &str| self.metadata_strings.iter().any(|m| m == k);
                metadata(s, &mut pod.meta, strings, true, listed, true)
            }
            "spec" => {
                once(&mut seen, 8)?;
                let mut seen = 0u32;
                s.object(|s, key| match key.as_ref() {
                    "nodeName" => text_once(s, &mut seen, 1, &mut pod.node),
                    "serviceAccountName" => text_once(s, &mut seen, 2, &mut pod.account),
                    "hostNetwork" => {
                        once(&mut seen, 4)?;
                        if s.peek() != Some(b'f') {
                            return Err(Fail::Decline); // true, or not a boolean
                        }
                        s.literal(b"false")
                    }
                    "containers" => {
                        once(&mut seen, 8)?;
                        self.ports(s, &mut pod.ports)
                    }
                    "initContainers" => {
                        once(&mut seen, 16)?;
                        self.ports(s, &mut pod.init_ports)
                    }
                    other if self.spec_unread.contains(other) => s.skip(),
                    _ => Err(Fail::Decline),
                })
            }
            "status" => {
                once(&mut seen, 16)?;
                let mut seen = 0u32;
                s.object(|s, key| match key.as_ref() {
                    "phase" => text_once(s, &mut seen, 1, &mut pod.phase),
                    "podIP" => text_once(s, &mut seen, 2, &mut pod.pod_ip),
                    "podIPs" => {
                        once(&mut seen, 4)?;
                        s.array(|s| {
                            let mut ip = None;
                            s.object(|s, key| {
                                if key != "ip" || ip.is_some() {
                                    return Err(Fail::Decline);
                                }
                                ip = Some(s.text()?);
                                Ok(())
                            })?;
                            pod.pod_ips.push(ip.ok_or(Fail::Decline)?);
                            Ok(())
                        })
                    }
                    other if self.status_unread.contains(other) => s.skip(),
                    _ => Err(Fail::Decline),
                })
            }
            _ => Err(Fail::Decline),
        })?;
        let version = if pod.endpoint.is_some() {
            "projectcalico.org/v3"
        } else {
            "v1"
        };
        let implied = listed && seen & 3 == 0 && pod.endpoint.is_none();
        if !implied && (pod.kind.is_none() || pod.api_version.as_deref() != Some(version)) {
            return Err(Fail::Decline);
        }
        if seen & 12 != 12 {
            return Err(Fail::Decline);
        }
        if pod.endpoint.is_some() && seen != 15 {
            return Err(Fail::Decline); // an endpoint has exactly its four top-level fields
        }
        Ok(pod)
    }

    /// An item's resourceVersion and fields' tuple, read as ``kind`` is.
    fn item<'a>(
        &self,
        py: Python<'_>,
        s: &mut Scanner<'a>,
        kind: Listing,
        listed: bool,
        prefix: &str,
    ) -> R<(Cow<'a, str>, PyObject)> {
        let meta = match kind {
            Listing::Pod => {
                let pod = self.pod(s, listed)?;
                let fields = self.fields(py, &pod, prefix)?;
                return Ok((pod.meta.resource_version, fields));
            }
            Listing::Namespace => self.namespace(s)?,
            Listing::ServiceAccount => self.account(s)?,
        };
        let fields = self.profile_fields(py, kind, &meta)?;
        Ok((meta.resource_version, fields))
    }

    /// A listed Namespace's metadata, as ``plain_namespace_fields`` takes the document
    /// ``listed_document`` makes of it: its uid, resourceVersion and creationTimestamp
    /// strings, managedFields stepped over, finalizers and a phase the only spec and status,
    /// its name a DNS label and its labels and annotations valid; anything else declines.
    fn namespace<'a>(&self, s: &mut Scanner<'a>) -> R<Meta<'a>> {
        let mut meta = Meta::default();
        let mut seen = 0u32;
        s.object(|s, key| match key.as_ref() {
            "metadata" => {
                once(&mut seen, 1)?;
                metadata(s, &mut meta, bookkeeping, false, true, false)
            }
            "spec" => {
                once(&mut seen, 2)?;
                only_field(s, "finalizers", |s| s.array(|s| s.text().map(drop)))
            }
            "status" => {
                once(&mut seen, 4)?;
                only_field(s, "phase", |s| s.text().map(drop))
            }
            _ => Err(Fail::Decline),
        })?;
        if seen & 1 == 0 || !label(&meta.name, 63) || !labels_ok(&meta.labels, &meta.annotations) {
            return Err(Fail::Decline);
        }
        Ok(meta)
    }

    /// A listed ServiceAccount's metadata, as ``plain_account_fields`` takes the document
    /// ``listed_document`` makes of it: its secrets' and image pull secrets' arrays stepped
    /// over, its automount flag a boolean, its namespace given and its metadata valid.
    fn account<'a>(&self, s: &mut Scanner<'a>) -> R<Meta<'a>> {
        let mut meta = Meta::default();
        let mut seen = 0u32;
        s.object(|s, key| match key.as_ref() {
            "metadata" => {
                once(&mut seen, 1)?;
                metadata(s, &mut meta, bookkeeping, false, true, true)
            }
            "secrets" | "imagePullSecrets" => {
                once(&mut seen, if key == "secrets" { 2 } else { 4 })?;
                if s.peek() != Some(b'[') {
                    return Err(Fail::Decline);
                }
                s.skip()
            }
            "automountServiceAccountToken" => {
                once(&mut seen, 8)?;
                match s.peek() {
                    Some(b't') => s.literal(b"true"),
                    Some(b'f') => s.literal(b"false"),
                    _ => Err(Fail::Decline),
                }
            }
            _ => Err(Fail::Decline),
        })?;
        if seen & 1 == 0
            || meta.namespace.is_empty()
            || !metadata_ok(&meta.name, &meta.namespace, &meta.labels, &meta.annotations)
        {
            return Err(Fail::Decline);
        }
        Ok(meta)
    }

    /// A read namespace's or service account's fields' tuple, as the Python readers make
    /// it: the kind, (an account's namespace,) its name interned, and its labels.
    fn profile_fields(&self, py: Python<'_>, kind: Listing, meta: &Meta<'_>) -> R<PyObject> {
        let labels = PyDict::new_bound(py);
        for (k, v) in &meta.labels {
            labels
                .set_item(k.as_ref(), v.as_ref())
                .map_err(|_| Fail::Decline)?;
        }
        let name = self.intern(py, &meta.name).into_any();
        let labels = labels.into_any();
        let tuple = match kind {
            Listing::Namespace => PyTuple::new_bound(
                py,
                [
                    PyString::new_bound(py, "Namespace").into_any(),
                    name,
                    labels,
                ],
            ),
            _ => PyTuple::new_bound(
                py,
                [
                    PyString::new_bound(py, "ServiceAccount").into_any(),
                    self.intern(py, &meta.namespace).into_any(),
                    name,
                    labels,
                ],
            ),
        };
        Ok(tuple.into_any().unbind())
    }

    /// A string interned, as Python's ``sys.intern`` would give it (remembered here: a
    /// cluster's label strings, namespaces and nodes repeat across thousands of items).
    fn intern<'py>(&self, py: Python<'py>, text: &str) -> Bound<'py, PyString> {
        let mut cache = self.interned.borrow_mut();
        if let Some(known) = cache.get(text) {
            return known.bind(py).clone();
        }
        if cache.len() >= INTERNED_MAX {
            cache.clear();
        }
        let made = PyString::intern_bound(py, text);
        cache.insert(text.to_owned(), made.clone().unbind());
        made
    }

    /// ``workload_label_dict``: the labels but Calico's own prefixes, then the namespace,
    /// orchestrator and service account labels, keys and values interned.
    fn label_dict<'py>(
        &self,
        py: Python<'py>,
        given: &[(Cow<'_, str>, Cow<'_, str>)],
        namespace: &Bound<'py, PyString>,
        orchestrator: &str,
        account: &str,
    ) -> R<Bound<'py, PyDict>> {
        let labels = PyDict::new_bound(py);
        let set = |k: &Bound<'py, PyString>, v: &Bound<'py, PyString>| {
            labels.set_item(k, v).map_err(|_| Fail::Decline)
        };
        for (k, v) in given {
            if k.starts_with("pcns.") || k.starts_with("pcsa.") {
                continue;
            }
            set(&self.intern(py, k), &self.intern(py, v))?;
        }
        set(&self.intern(py, "projectcalico.org/namespace"), namespace)?;
        set(
            &self.intern(py, "projectcalico.org/orchestrator"),
            &self.intern(py, orchestrator),
        )?;
        if !account.is_empty() {
            set(
                &self.intern(py, "projectcalico.org/serviceaccount"),
                &self.intern(py, account),
            )?;
        }
        Ok(labels)
    }

    /// The tuple ``checked_fields`` makes of a decoded WorkloadEndpoint, or a decline.
    fn endpoint_fields(
        &self,
        py: Python<'_>,
        doc: &Pod<'_>,
        endpoint: &Endpoint<'_>,
    ) -> R<PyObject> {
        let strings = &endpoint.strings;
        let (orchestrator, node, point, workload) = (
            strings[0].as_ref(),
            strings[1].as_ref(),
            strings[2].as_ref(),
            strings[3].as_ref(),
        );
        let (pod, account, interface, mac) = (
            strings[4].as_ref(),
            strings[5].as_ref(),
            strings[6].as_ref(),
            strings[7].as_ref(),
        );
        let namespace = if doc.meta.namespace.is_empty() {
            "default"
        } else {
            doc.meta.namespace.as_ref()
        };
        if !(mac.is_empty() || mac_ok(mac)) || !interface_ok(interface) {
            return Err(Fail::Decline);
        }
        if !metadata_ok(
            &doc.meta.name,
            namespace,
            &doc.meta.labels,
            &doc.meta.annotations,
        ) {
            return Err(Fail::Decline);
        }
        for name in [orchestrator, workload, node, pod, point, account] {
            if !(name.is_empty() || subdomain(name)) {
                return Err(Fail::Decline);
            }
        }
        if !endpoint.profiles.iter().all(|p| subdomain(p)) {
            return Err(Fail::Decline);
        }
        let mut nets = Vec::with_capacity(endpoint.networks.len());
        for network in &endpoint.networks {
            nets.push(ipv4_host(network).ok_or(Fail::Decline)?);
        }
        let workload = if pod.is_empty() { workload } else { pod };
        if node.is_empty() || point.is_empty() || workload.is_empty() {
            return Err(Fail::Decline); // the key is worked out otherwise (workload_key_of)
        }
        let orchestrator = if orchestrator.is_empty() {
            "k8s"
        } else {
            orchestrator
        };
        let intern = |text: &str| self.intern(py, text);
        let namespace_s = intern(namespace);
        let key_parts = PyTuple::new_bound(
            py,
            [
                intern(node).into_any(),
                intern(orchestrator).into_any(),
                PyString::new_bound(py, &format!("{namespace}/{workload}")).into_any(),
                intern(point).into_any(),
            ],
        );
        let labels = self.label_dict(py, &doc.meta.labels, &namespace_s, orchestrator, account)?;
        let items: [Bound<'_, PyAny>; 8] = [
            PyString::new_bound(py, &doc.meta.name).into_any(),
            namespace_s.into_any(),
            key_parts.into_any(),
            PyString::new_bound(py, interface).into_any(),
            PyString::new_bound(py, mac).into_any(),
            PyTuple::new_bound(py, endpoint.profiles.iter().map(|p| intern(p))).into_any(),
            PyTuple::new_bound(py, nets.iter().map(|n| PyString::new_bound(py, n))).into_any(),
            labels.into_any(),
        ];
        Ok(PyTuple::new_bound(py, items).into_any().unbind())
    }

    /// The tuple ``checked_pod_fields`` makes of a decoded pod (or ``checked_fields`` of a
    /// WorkloadEndpoint), or a decline.
    fn fields(&self, py: Python<'_>, pod: &Pod<'_>, prefix: &str) -> R<PyObject> {
        if let Some(endpoint) = &pod.endpoint {
            return self.endpoint_fields(py, pod, endpoint);
        }
        if pod.node.is_empty() {
            return Err(Fail::Decline);
        }
        if pod
            .meta
            .annotations
            .iter()
            .any(|(k, _)| self.special_annotations.contains(k.as_ref()))
        {
            return Err(Fail::Decline);
        }
        let mut named: Vec<(&str, &'static str, i64)> = Vec::new();
        for port in pod.ports.iter().chain(pod.init_ports.iter()) {
            let protocol = match port.protocol.as_ref() {
                "" | "TCP" => "tcp",
                "UDP" => "udp",
                "SCTP" => "sctp",
                _ => return Err(Fail::Decline),
            };
            let number = port.number.ok_or(Fail::Decline)?;
            if !(1..=65535).contains(&number) {
                return Err(Fail::Decline);
            }
            if !port.name.is_empty() {
                if !port_name_ok(&port.name) {
                    return Err(Fail::Decline);
                }
                named.push((port.name.as_ref(), protocol, number));
            }
        }
        if !metadata_ok(
            &pod.meta.name,
            &pod.meta.namespace,
            &pod.meta.labels,
            &pod.meta.annotations,
        ) {
            return Err(Fail::Decline);
        }
        let addresses = self.addresses(pod);
        let mut v4: Vec<String> = Vec::with_capacity(addresses.len());
        let mut v6: Vec<String> = Vec::new();
        for address in addresses {
            let network = canonical_network(address).ok_or(Fail::Decline)?;
            if network.contains(':') {
                v6.push(network);
            } else {
                v4.push(network);
            }
        }
        if self.finished_phases.contains(pod.phase.as_ref()) {
            v4.clear();
            v6.clear();
        }
        let intern = |text: &str| self.intern(py, text);
        let namespace = intern(&pod.meta.namespace);
        let node = intern(&pod.node);
        let key_parts = PyTuple::new_bound(
            py,
            [
                node.clone().into_any(),
                intern("k8s").into_any(),
                PyString::new_bound(py, &format!("{}/{}", pod.meta.namespace, pod.meta.name))
                    .into_any(),
                intern("eth0").into_any(),
            ],
        );
        let digest = sha1_smol::Sha1::from(format!("{}.{}", pod.meta.namespace, pod.meta.name))
            .digest()
            .to_string();
        let interface = format!("{}{}", prefix, &digest[..11]);
        let mut profiles = vec![intern(&format!("kns.{}", pod.meta.namespace))];
        if !pod.account.is_empty() {
            profiles.push(intern(&format!(
                "ksa.{}.{}",
                pod.meta.namespace, pod.account
            )));
        }
        let ports = PyTuple::new_bound(
            py,
            named.iter().map(|(name, protocol, number)| {
                PyTuple::new_bound(
                    py,
                    [
                        intern(name).into_any(),
                        intern(protocol).into_any(),
                        number.into_py(py).into_bound(py),
                    ],
                )
            }),
        );
        let labels = self.label_dict(py, &pod.meta.labels, &namespace, "k8s", &pod.account)?;
        let items: [Bound<'_, PyAny>; 10] = [
            intern("Pod").into_any(),
            PyString::new_bound(py, &pod.meta.name).into_any(),
            namespace.into_any(),
            key_parts.into_any(),
            PyString::new_bound(py, &interface).into_any(),
            PyTuple::new_bound(py, profiles).into_any(),
            PyTuple::new_bound(py, v4.iter().map(|a| PyString::new_bound(py, a))).into_any(),
            PyTuple::new_bound(py, v6.iter().map(|a| PyString::new_bound(py, a))).into_any(),
            ports.into_any(),
            labels.into_any(),
        ];
        Ok(PyTuple::new_bound(py, items).into_any().unbind())
    }

    /// ``ip_source``'s entries: the first of the status' and the annotations' that is set.
    fn addresses<'b>(&self, pod: &'b Pod<'_>) -> Vec<&'b str> {
        if !pod.pod_ips.is_empty() {
            return pod.pod_ips.iter().map(|a| a.as_ref()).collect();
        }
        if !pod.pod_ip.is_empty() {
            return vec![pod.pod_ip.as_ref()];
        }
        for (key, plural) in &self.address_annotations {
            if let Some((_, text)) = pod.meta.annotations.iter().find(|(k, _)| k == key) {
                if !text.is_empty() {
                    return if *plural {
                        text.split(',').collect()
                    } else {
                        vec![text.as_ref()]
                    };
                }
            }
        }
        Vec::new()
    }
}

fn alnum_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// A DNS-1123 label of at most `limit` characters.
fn label(text: &str, limit: usize) -> bool {
    let b = text.as_bytes();
    !b.is_empty()
        && b.len() <= limit
        && alnum_lower(b[0])
        && alnum_lower(b[b.len() - 1])
        && b.iter().all(|&c| alnum_lower(c) || c == b'-')
}

/// A DNS-1123 subdomain (at most 253 characters).
fn subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(|part| label(part, usize::MAX))
}

fn name_part(text: &str) -> bool {
    let b = text.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// Kubernetes' `[prefix/]name` label key.
fn qualified(key: &str) -> bool {
    match key.rsplit_once('/') {
        Some((prefix, name)) => subdomain(prefix) && name_part(name),
        None => name_part(key),
    }
}

fn label_value(value: &str) -> bool {
    value.is_empty() || name_part(value)
}

/// The IANA service name rule Calico applies to named ports.
fn port_name_ok(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() <= 15
        && !b.is_empty()
        && b.iter().all(|&c| alnum_lower(c) || c == b'-')
        && b.iter().any(|c| c.is_ascii_lowercase())
        && !name.contains("--")
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// What ``check_metadata`` accepts of a namespaced kind's name, namespace, labels and
/// annotations (``plain_metadata_valid``), ASCII only.
fn metadata_ok(
    name: &str,
    namespace: &str,
    labels: &[(Cow<'_, str>, Cow<'_, str>)],
    annotations: &[(Cow<'_, str>, Cow<'_, str>)],
) -> bool {
    subdomain(name) && label(namespace, 63) && labels_ok(labels, annotations)
}

/// What ``good_labels`` and ``good_annotations`` accept, ASCII only.
fn labels_ok(
    labels: &[(Cow<'_, str>, Cow<'_, str>)],
    annotations: &[(Cow<'_, str>, Cow<'_, str>)],
) -> bool {
    if !labels.iter().all(|(k, v)| qualified(k) && label_value(v)) {
        return false;
    }
    let mut total = 0usize;
    for (k, v) in annotations {
        if !k.is_ascii() || !qualified(&k.to_ascii_lowercase()) {
            return false;
        }
        total += k.len() + v.chars().count();
    }
    total <= 256 * 1024
}

/// A Linux interface name as Calico's validation takes it: 1-15 of `[a-zA-Z0-9_.-]`, not
/// starting with `-`.
fn interface_ok(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=15).contains(&b.len())
        && b[0] != b'-'
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
}

/// A MAC address in one of the two spellings Calico's validation takes
/// (`aa:bb:cc:dd:ee:ff` or `-` between the pairs; `aabb.ccdd.eeff`).
fn mac_ok(mac: &str) -> bool {
    let b = mac.as_bytes();
    let hex = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_hexdigit);
    match b.len() {
        17 => {
            (0..6).all(|i| hex(i * 3..i * 3 + 2) && (i == 5 || matches!(b[i * 3 + 2], b':' | b'-')))
        }
        14 => (0..3).all(|i| hex(i * 5..i * 5 + 4) && (i == 2 || b[i * 5 + 4] == b'.')),
        _ => false,
    }
}

/// ``canonical_network``: an address or CIDR as ``str(ipaddress.ip_network(text,
/// strict=False))`` prints it, host bits cleared; None for what that refuses, and for what
/// this does not follow (a netmask or a zero-padded prefix, an IPv4-mapped IPv6 address,
/// whose spelling depends on Python's version, an embedded IPv4 address, a zone).
fn canonical_network(text: &str) -> Option<String> {
    if let Some(host) = ipv4_host(text) {
        return Some(host);
    }
    let (address, prefix) = match text.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (text, None),
    };
    let v6 = address.contains(':');
    let max = if v6 { 128 } else { 32 };
    let length = match prefix {
        None => max,
        Some(p) => {
            let b = p.as_bytes();
            if b.is_empty() || b.len() > 3 || !b.iter().all(u8::is_ascii_digit) {
                return None;
            }
            if b.len() > 1 && b[0] == b'0' {
                return None;
            }
            let length: u32 = p.parse().ok()?;
            if length > max {
                return None;
            }
            length
        }
    };
    if v6 {
        let bits = ipv6_bits(address)?;
        if bits >> 32 == 0xffff {
            return None; // IPv4-mapped
        }
        let masked = if length == 0 {
            0
        } else {
            bits & (u128::MAX << (128 - length))
        };
        Some(format!("{}/{length}", ipv6_text(masked)))
    } else {
        let host = ipv4_host(address)?;
        let bits: u32 = host[..host.len() - 3]
            .split('.')
            .fold(0, |acc, part| (acc << 8) | part.parse::<u32>().unwrap_or(0));
        let masked = if length == 0 {
            0
        } else {
            bits & (u32::MAX << (32 - length))
        };
        let [a, b, c, d] = masked.to_be_bytes();
        Some(format!("{a}.{b}.{c}.{d}/{length}"))
    }
}

/// An IPv6 address parsed as Python's ipaddress parses it (hextets of one to four hex
/// digits, at most one `::` standing for at least one hextet); None for anything else,
/// and for an embedded IPv4 address or a zone, which this leaves to Python.
fn ipv6_bits(text: &str) -> Option<u128> {
    if !text.bytes().all(|c| c.is_ascii_hexdigit() || c == b':') {
        return None;
    }
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() < 3 || parts.len() > 9 {
        return None;
    }
    let inner = &parts[1..parts.len() - 1];
    let mut skip = None;
    for (i, part) in inner.iter().enumerate() {
        if part.is_empty() {
            if skip.is_some() {
                return None;
            }
            skip = Some(i + 1);
        }
    }
    let (mut high, mut low, skipped) = match skip {
        Some(at) => {
            let mut high = at;
            let mut low = parts.len() - at - 1;
            if parts[0].is_empty() {
                high -= 1;
                if high != 0 {
                    return None;
                }
            }
            if parts[parts.len() - 1].is_empty() {
                low -= 1;
                if low != 0 {
                    return None;
                }
            }
            if high + low >= 8 {
                return None;
            }
            (high, low, 8 - high - low)
        }
        None => {
            if parts.len() != 8 || parts[0].is_empty() || parts[7].is_empty() {
                return None;
            }
            (8, 0, 0)
        }
    };
    let hextet = |part: &str| -> Option<u128> {
        if part.is_empty() || part.len() > 4 {
            return None;
        }
        u128::from_str_radix(part, 16).ok()
    };
    let mut bits: u128 = 0;
    let mut at = 0;
    while high > 0 {
        bits = (bits << 16) | hextet(parts[at])?;
        at += 1;
        high -= 1;
    }
    bits <<= 16 * skipped as u32;
    let mut from = parts.len() - low;
    while low > 0 {
        bits = (bits << 16) | hextet(parts[from])?;
        from += 1;
        low -= 1;
    }
    Some(bits)
}

/// An IPv6 address as Python's ipaddress prints it: lower-case hextets without leading
/// zeros, the first longest run of two or more zero hextets as `::`.
fn ipv6_text(bits: u128) -> String {
    let hextets: Vec<u16> = (0..8).map(|i| (bits >> (112 - 16 * i)) as u16).collect();
    let (mut best, mut best_len, mut run, mut run_len) = (0, 0, 0, 0);
    for (i, h) in hextets.iter().enumerate() {
        if *h == 0 {
            if run_len == 0 {
                run = i;
            }
            run_len += 1;
            if run_len > best_len {
                best = run;
                best_len = run_len;
            }
        } else {
            run_len = 0;
        }
    }
    let text = |range: &[u16]| {
        range
            .iter()
            .map(|h| format!("{h:x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    if best_len > 1 {
        format!(
            "{}::{}",
            text(&hextets[..best]),
            text(&hextets[best + best_len..])
        )
    } else {
        text(&hextets)
    }
}

/// A dotted-quad IPv4 address as Python's ipaddress prints it, bare or /32, as a /32.
fn ipv4_host(text: &str) -> Option<String> {
    let address = text.strip_suffix("/32").unwrap_or(text);
    let mut parts = 0;
    for part in address.split('.') {
        parts += 1;
        let b = part.as_bytes();
        if b.is_empty() || b.len() > 3 || !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        if b.len() > 1 && b[0] == b'0' {
            return None;
        }
        if part.parse::<u32>().ok()? > 255 {
            return None;
        }
    }
    (parts == 4).then(|| format!("{address}/32"))
}

#[pymethods]
impl PlainReader {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        metadata_strings: Vec<String>,
        spec_unread: FxSet<String>,
        status_unread: FxSet<String>,
        container_unread: FxSet<String>,
        special_annotations: FxSet<String>,
        address_annotations: Vec<(String, bool)>,
        finished_phases: FxSet<String>,
        endpoint_metadata_strings: Vec<String>,
        endpoint_strings: Vec<String>,
        endpoint_unread_strings: Vec<String>,
    ) -> PyResult<Self> {
        if endpoint_strings.len() != 8 {
            return Err(PyValueError::new_err(
                "a WorkloadEndpoint's spec has 8 read strings",
            ));
        }
        Ok(PlainReader {
            metadata_strings,
            endpoint_metadata_strings,
            endpoint_strings,
            endpoint_unread_strings,
            spec_unread,
            status_unread,
            container_unread,
            special_annotations,
            address_annotations,
            finished_phases,
            interned: RefCell::new(FxMap::default()),
        })
    }

    /// (the List's own fields as (key, text) pairs, or None for a top-level array; each
    /// item as its fields' tuple or its text), or None for text left to the Python path.
    /// ``listed``: a page of an API server's listing of ``kind`` (Pod, Namespace or
    /// ServiceAccount), each item read (as ``pod``, ``namespace`` or ``account`` says)
    /// given as its resourceVersion and its fields' tuple.
    #[pyo3(signature = (text, prefix, listed = false, kind = "Pod"))]
    fn read_list(
        &self,
        py: Python<'_>,
        text: &str,
        prefix: &str,
        listed: bool,
        kind: &str,
    ) -> Option<(PyObject, PyObject)> {
        let kind = match kind {
            "Pod" => Listing::Pod,
            "Namespace" if listed => Listing::Namespace,
            "ServiceAccount" if listed => Listing::ServiceAccount,
            _ => return None, // a kind it does not read: the page is left to Python
        };
        let mut s = Scanner {
            s: text,
            b: text.as_bytes(),
            i: 0,
            depth: 0,
        };
        let items = PyList::empty_bound(py);
        let read_items = |s: &mut Scanner<'_>| -> R<()> {
            s.array(|s| {
                s.ws();
                let start = s.i;
                let depth = s.depth;
                let read = self
                    .item(py, s, kind, listed, prefix)
                    .map(|(version, fields)| {
                        if !listed {
                            return fields;
                        }
                        let version = PyString::new_bound(py, &version);
                        PyTuple::new_bound(py, [version.into_any().unbind(), fields])
                            .into_any()
                            .unbind()
                    });
                match read {
                    Ok(fields) => items.append(fields).map_err(|_| Fail::Invalid),
                    Err(Fail::Invalid) => Err(Fail::Invalid),
                    Err(Fail::Decline) => {
                        s.i = start;
                        s.depth = depth;
                        s.skip()?;
                        let raw = PyBytes::new_bound(py, &s.b[start..s.i]);
                        items.append(raw).map_err(|_| Fail::Invalid)
                    }
                }
            })
        };
        let fields: PyObject = match s.peek() {
            Some(b'[') => {
                if read_items(&mut s).is_err() {
                    return None;
                }
                py.None()
            }
            Some(b'{') => {
                let pairs = PyList::empty_bound(py);
                let mut have_items = false;
                let outcome = s.object(|s, key| {
                    if key == "items" {
                        if have_items {
                            return Err(Fail::Decline);
                        }
                        have_items = true;
                        pairs
                            .append(("items", py.None()))
                            .map_err(|_| Fail::Invalid)?;
                        return read_items(s);
                    }
                    s.ws();
                    let start = s.i;
                    s.skip()?;
                    let raw = PyBytes::new_bound(py, &s.b[start..s.i]);
                    pairs.append((key.as_ref(), raw)).map_err(|_| Fail::Invalid)
                });
                if outcome.is_err() || !have_items {
                    return None;
                }
                pairs.into_any().unbind()
            }
            _ => return None,
        };
        s.ws();
        if s.i != s.b.len() {
            return None;
        }
        Some((fields, items.into_any().unbind()))
    }
}

/// The base of the model's kept-hash classes (pyfelix/model.py): the hash of the fields
/// equality compares, computed on first use by the class's `_hashed` and kept here, so that
/// every later hash is read in C (a Python `__hash__` was a frame for each of 8M lookups of
/// a dry-run's keys) and kept as a machine word rather than an int object.
#[pyclass(subclass, frozen, module = "pyfelix._native")]
struct KeptHash {
    /// -1 until computed (no hash is -1: Python keeps it for errors).
    hash: AtomicIsize,
}

#[pymethods]
impl KeptHash {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        KeptHash {
            hash: AtomicIsize::new(-1),
        }
    }

    fn __hash__(slf: &Bound<'_, Self>) -> PyResult<isize> {
        let this = slf.get();
        let kept = this.hash.load(Ordering::Relaxed);
        if kept != -1 {
            return Ok(kept);
        }
        let py = slf.py();
        let fields = slf
            .get_type()
            .getattr(pyo3::intern!(py, "_hashed"))?
            .call1((slf,))?;
        let hash = fields.hash()?;
        this.hash.store(hash, Ordering::Relaxed);
        Ok(hash)
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PlainReader>()?;
    m.add_class::<KeptHash>()?;
    Ok(())
}
