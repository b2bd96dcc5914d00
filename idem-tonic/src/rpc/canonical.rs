//! The deterministic ("canonical") encoding of a protobuf message, for fingerprinting requests.
//!
//! A gRPC server decodes a request into a prost struct, re-encodes it and hashes the bytes to tell
//! whether a retry is the same request. prost writes fields in a fixed order and drops unknown fields,
//! so that re-encoding is deterministic except for map fields: prost maps are `HashMap`s, whose entries
//! come out in a random order, at any depth. [`Schemas::canonical`] rewrites such an encoding with the
//! message's descriptor so that equal messages always give equal bytes.
//!
//! A message-typed field whose type is not in [`Schemas`] (typically a well-known type such as
//! `google.protobuf.Struct` when the build did not include it in its descriptor set) is copied as
//! opaque bytes: canonicalizing never fails because of it, but maps inside it are not sorted.

use std::collections::HashMap;

use prost::Message as _;
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};

mod error;
mod wire;
mod writer;

pub(crate) use error::{CanonicalError, SchemaError, WireProblem};

/// What canonicalizing does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    /// Copied as-is: scalars, packed scalars, strings, bytes, and messages of unknown type.
    Copy,
    /// A message of known type (an index into `Schemas::shapes`): canonicalized recursively.
    Message(usize),
    /// A map whose entry message has this index: entries canonicalized, then sorted.
    Map(usize),
}

/// One field of a resolved message.
#[derive(Debug, Clone)]
struct FieldShape {
    /// The field number.
    number: u32,
    /// The proto name, for `skip`.
    name: String,
    /// What to do with it.
    kind: FieldKind,
}

/// A message resolved for canonicalizing: no string look-ups on the hot path.
#[derive(Debug, Clone)]
struct Shape {
    /// The full name, for error messages.
    name: String,
    /// The fields, sorted by number for binary search.
    fields: Vec<FieldShape>,
    /// What to do with each field numbered below [`BY_NUMBER`] (most messages number all their
    /// fields so), by number: one load, where a binary search branches unpredictably per field.
    by_number: Vec<Option<FieldKind>>,
    /// Whether no map is reachable from it (a map field, or a message field whose type reaches
    /// one): prost then writes it canonical, and the writer checks it and copies it whole.
    map_free: bool,
}

/// The field numbers [`Shape::by_number`] covers: those below it.
const BY_NUMBER: u32 = 128;

impl Shape {
    /// The shape of message `name` with `fields`, sorted by number.
    fn new(name: String, fields: Vec<FieldShape>) -> Self {
        let mut by_number = Vec::new();
        for field in fields.iter().filter(|f| f.number < BY_NUMBER) {
            let number = field.number as usize;
            if by_number.len() <= number {
                by_number.resize(number + 1, None);
            }
            by_number[number] = Some(field.kind);
        }
        let map_free = !fields.iter().any(|f| matches!(f.kind, FieldKind::Map(_)));
        Self {
            name,
            fields,
            by_number,
            map_free,
        }
    }

    /// What to do with field `number`, or `None` when the descriptor does not know it.
    #[inline]
    fn kind(&self, number: u32) -> Option<FieldKind> {
        if number < BY_NUMBER {
            return self.by_number.get(number as usize).copied().flatten();
        }
        let i = self
            .fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()?;
        Some(self.fields[i].kind)
    }
}

/// A message as declared, kept so that later descriptor sets can resolve types of earlier ones.
#[derive(Debug, Clone)]
struct Declared {
    /// `options.map_entry`: the message is the entry type of a map field.
    map_entry: bool,
    /// Number, name, and full name of the message type (if message-typed) of each field.
    fields: Vec<(u32, String, Option<String>)>,
}

/// The shapes of the messages of one or more FileDescriptorSets: which fields are maps and which are
/// messages.
#[derive(Debug, Default, Clone)]
pub(crate) struct Schemas {
    /// Every message added, by full name without the leading dot.
    declared: HashMap<String, Declared>,
    /// The resolved messages, rebuilt after each added set.
    shapes: Vec<Shape>,
    /// Index into `shapes` by full name.
    index: HashMap<String, usize>,
}

impl Schemas {
    /// Adds every message (nested ones too) of an encoded `google.protobuf.FileDescriptorSet`, as
    /// build scripts write it with `file_descriptor_set_path`. Types referenced by messages added
    /// earlier are resolved again, so sets may come in any order (e.g. well-known types last).
    ///
    /// # Errors
    ///
    /// [`SchemaError`] when the bytes do not decode; nothing is added then.
    pub(crate) fn add_file_descriptor_set(&mut self, encoded: &[u8]) -> Result<(), SchemaError> {
        let set = FileDescriptorSet::decode(encoded).map_err(SchemaError::Decode)?;
        for file in &set.file {
            for message in &file.message_type {
                self.declare(file.package(), message);
            }
        }
        self.resolve();
        Ok(())
    }

    /// Whether the message `full_name` (e.g. `ledger.v1.CreateTransferRequest`) is known.
    pub(crate) fn contains(&self, full_name: &str) -> bool {
        self.index.contains_key(full_name)
    }

    /// Calls `f` with the canonical encoding of `encoded`, a valid encoding of message
    /// `full_name` as prost wrote it, and returns what it returns. The bytes are written in the
    /// thread's buffers: once they have grown, no allocation.
    ///
    /// Fields are ordered by number (stably: repeated fields keep their order, which is meaning), the
    /// entries of every map are sorted by their canonical bytes (key first), message-typed fields and
    /// message map values are canonicalized recursively, fields the descriptor does not know are
    /// dropped, and the top-level field named `skip` (the idempotency key itself) is left out.
    /// Message-typed fields of types not in these schemas are copied as they are (see the module).
    ///
    /// # Errors
    ///
    /// [`CanonicalError`] when `full_name` or `skip` is unknown, when the bytes are malformed (also
    /// groups, which are refused), or when messages nest deeper than 100 levels.
    pub(crate) fn with_canonical<R>(
        &self,
        full_name: &str,
        encoded: &[u8],
        skip: Option<&str>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, CanonicalError> {
        let &root = self
            .index
            .get(full_name)
            .ok_or_else(|| CanonicalError::UnknownMessage(full_name.to_owned()))?;
        let skip = skip.map(|name| self.skip_number(root, name)).transpose()?;
        writer::with_canonical(&self.shapes, root, encoded, skip, f)
    }

    /// [`with_canonical`](Self::with_canonical)'s bytes, owned.
    #[cfg(test)]
    pub(crate) fn canonical(
        &self,
        full_name: &str,
        encoded: &[u8],
        skip: Option<&str>,
    ) -> Result<Vec<u8>, CanonicalError> {
        self.with_canonical(full_name, encoded, skip, <[u8]>::to_vec)
    }

    /// The number of field `name` of message `root`, resolved once per call rather than per field.
    fn skip_number(&self, root: usize, name: &str) -> Result<u32, CanonicalError> {
        let shape = &self.shapes[root];
        let field = shape.fields.iter().find(|f| f.name == name);
        field
            .map(|f| f.number)
            .ok_or_else(|| CanonicalError::UnknownSkipField {
                message: shape.name.clone(),
                field: name.to_owned(),
            })
    }

    /// Records `message` and its nested messages under `scope` (a package or an enclosing message).
    fn declare(&mut self, scope: &str, message: &DescriptorProto) {
        let full_name = if scope.is_empty() {
            message.name().to_owned()
        } else {
            format!("{scope}.{}", message.name())
        };
        let fields = message.field.iter().filter_map(|f| {
            let number = u32::try_from(f.number()).ok().filter(|&n| n > 0)?;
            let type_name = (f.r#type() == Type::Message)
                .then(|| f.type_name().trim_start_matches('.').to_owned());
            Some((number, f.name().to_owned(), type_name))
        });
        let map_entry = message.options.as_ref().is_some_and(|o| o.map_entry());
        let declared = Declared {
            map_entry,
            fields: fields.collect(),
        };
        for nested in &message.nested_type {
            self.declare(&full_name, nested);
        }
        self.declared.insert(full_name, declared);
    }

    /// Rebuilds `shapes` from `declared`, resolving message types to indices and finding maps.
    fn resolve(&mut self) {
        let mut names: Vec<&String> = self.declared.keys().collect();
        names.sort();
        self.index = names
            .iter()
            .enumerate()
            .map(|(i, &n)| (n.clone(), i))
            .collect();
        self.shapes = names.iter().map(|&name| self.shape(name)).collect();
        // A message reaching a map through another message is not map-free either: spread
        // that up until nothing changes (at most once per message).
        loop {
            let reaches_map = |shape: &Shape| {
                shape.fields.iter().any(|f| match f.kind {
                    FieldKind::Message(child) => !self.shapes[child].map_free,
                    _ => false,
                })
            };
            let Some(i) = (0..self.shapes.len())
                .find(|&i| self.shapes[i].map_free && reaches_map(&self.shapes[i]))
            else {
                break;
            };
            self.shapes[i].map_free = false;
        }
    }

    /// The shape of the declared message `name`.
    fn shape(&self, name: &str) -> Shape {
        let declared = &self.declared[name];
        let mut fields: Vec<FieldShape> = (declared.fields.iter())
            .map(|(number, field, type_name)| FieldShape {
                number: *number,
                name: field.clone(),
                kind: self.kind(type_name.as_deref()),
            })
            .collect();
        fields.sort_by_key(|f| f.number);
        Shape::new(name.to_owned(), fields)
    }

    /// How to treat a field of message type `type_name` (`None` for scalars).
    fn kind(&self, type_name: Option<&str>) -> FieldKind {
        let Some(&index) = type_name.and_then(|t| self.index.get(t)) else {
            return FieldKind::Copy;
        };
        let map_entry = type_name
            .and_then(|t| self.declared.get(t))
            .is_some_and(|d| d.map_entry);
        if map_entry {
            FieldKind::Map(index)
        } else {
            FieldKind::Message(index)
        }
    }
}

#[cfg(test)]
mod tests;
