//! Tests of canonical encodings against messages that prost itself encodes and decodes, with a
//! descriptor set built by hand as a build script would have written it.

use std::collections::HashMap;
use std::hash::Hash;

use proptest::prelude::*;
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
};

use super::{CanonicalError, Schemas, WireProblem};

/// `test.v1.Item`: a plain nested message.
#[derive(Clone, PartialEq, Message)]
struct Item {
    #[prost(string, tag = "1")]
    sku: String,
    #[prost(int64, tag = "2")]
    qty: i64,
}

/// `test.v1.Inner`: a map value that has a map itself.
#[derive(Clone, PartialEq, Message)]
struct Inner {
    #[prost(map = "int32, string", tag = "1")]
    codes: HashMap<i32, String>,
    #[prost(string, tag = "2")]
    note: String,
}

/// `test.v1.Request`: maps, lists, a nested message, scalars, an opaque well-known type, the key.
#[derive(Clone, PartialEq, Message)]
struct Request {
    #[prost(string, tag = "1")]
    request_id: String,
    #[prost(int64, tag = "2")]
    amount: i64,
    #[prost(map = "string, string", tag = "3")]
    labels: HashMap<String, String>,
    #[prost(map = "string, message", tag = "4")]
    inners: HashMap<String, Inner>,
    #[prost(message, repeated, tag = "5")]
    items: Vec<Item>,
    #[prost(message, optional, tag = "6")]
    primary: Option<Item>,
    #[prost(int32, repeated, tag = "7")]
    nums: Vec<i32>,
    #[prost(message, optional, tag = "8")]
    created: Option<prost_types::Timestamp>,
    #[prost(fixed64, tag = "9")]
    stamp: u64,
    #[prost(float, tag = "10")]
    ratio: f32,
}

/// `test.v1.Node`: a recursive message, for the depth limit.
#[derive(Clone, PartialEq, Message)]
struct Node {
    #[prost(message, optional, boxed, tag = "1")]
    child: Option<Box<Node>>,
    #[prost(int32, tag = "2")]
    value: i32,
}

/// A field descriptor; `type_name` is fully qualified, as protoc writes it.
fn field(
    name: &str,
    number: i32,
    ty: Type,
    repeated: bool,
    type_name: Option<&str>,
) -> FieldDescriptorProto {
    let label = if repeated {
        Label::Repeated
    } else {
        Label::Optional
    };
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(ty as i32),
        type_name: type_name.map(Into::into),
        ..Default::default()
    }
}

/// A message descriptor.
fn message(
    name: &str,
    field: Vec<FieldDescriptorProto>,
    nested_type: Vec<DescriptorProto>,
) -> DescriptorProto {
    DescriptorProto {
        name: Some(name.into()),
        field,
        nested_type,
        ..Default::default()
    }
}

/// A map field `name` and its entry type, as protoc declares `map<K, V>`.
fn map(
    name: &str,
    entry: &str,
    number: i32,
    key: Type,
    value: Type,
    value_type: Option<&str>,
    scope: &str,
) -> (FieldDescriptorProto, DescriptorProto) {
    let fields = vec![
        field("key", 1, key, false, None),
        field("value", 2, value, false, value_type),
    ];
    let options = MessageOptions {
        map_entry: Some(true),
        ..Default::default()
    };
    let entry_type = DescriptorProto {
        options: Some(options),
        ..message(entry, fields, vec![])
    };
    (
        field(
            name,
            number,
            Type::Message,
            true,
            Some(&format!(".{scope}.{entry}")),
        ),
        entry_type,
    )
}

/// An encoded set of one file, of package `package`.
fn file_set(package: &str, message_type: Vec<DescriptorProto>) -> Vec<u8> {
    let file = FileDescriptorProto {
        name: Some(format!("{package}.proto")),
        package: Some(package.into()),
        message_type,
        ..Default::default()
    };
    FileDescriptorSet { file: vec![file] }.encode_to_vec()
}

/// The schemas of the test messages (without google.protobuf.Timestamp: it stays opaque).
fn schemas() -> Schemas {
    let item = message(
        "Item",
        vec![
            field("sku", 1, Type::String, false, None),
            field("qty", 2, Type::Int64, false, None),
        ],
        vec![],
    );
    let (codes, codes_entry) = map(
        "codes",
        "CodesEntry",
        1,
        Type::Int32,
        Type::String,
        None,
        "test.v1.Inner",
    );
    let inner = message(
        "Inner",
        vec![codes, field("note", 2, Type::String, false, None)],
        vec![codes_entry],
    );
    let (labels, labels_entry) = map(
        "labels",
        "LabelsEntry",
        3,
        Type::String,
        Type::String,
        None,
        "test.v1.Request",
    );
    let (inners, inners_entry) = map(
        "inners",
        "InnersEntry",
        4,
        Type::String,
        Type::Message,
        Some(".test.v1.Inner"),
        "test.v1.Request",
    );
    let request = message(
        "Request",
        vec![
            field("request_id", 1, Type::String, false, None),
            field("amount", 2, Type::Int64, false, None),
            labels,
            inners,
            field("items", 5, Type::Message, true, Some(".test.v1.Item")),
            field("primary", 6, Type::Message, false, Some(".test.v1.Item")),
            field("nums", 7, Type::Int32, true, None),
            field(
                "created",
                8,
                Type::Message,
                false,
                Some(".google.protobuf.Timestamp"),
            ),
            field("stamp", 9, Type::Fixed64, false, None),
            field("ratio", 10, Type::Float, false, None),
        ],
        vec![labels_entry, inners_entry],
    );
    let node = message(
        "Node",
        vec![
            field("child", 1, Type::Message, false, Some(".test.v1.Node")),
            field("value", 2, Type::Int32, false, None),
        ],
        vec![],
    );
    let mut schemas = Schemas::default();
    schemas
        .add_file_descriptor_set(&file_set("test.v1", vec![item, inner, request, node]))
        .expect("the set decodes");
    schemas
}

/// A request with several entries in every map, so that `HashMap` order shows.
fn sample() -> Request {
    let item = |sku: &str, qty| Item {
        sku: sku.into(),
        qty,
    };
    let inner = |n: i32| Inner {
        codes: (0..5).map(|c| (c * n - 7, format!("code{c}"))).collect(),
        note: format!("note{n}"),
    };
    Request {
        request_id: "key-1".into(),
        amount: -1250,
        labels: (0..8)
            .map(|i| (format!("label{i}"), format!("v{i}")))
            .collect(),
        inners: (1..5).map(|n| (format!("inner{n}"), inner(n))).collect(),
        items: vec![item("a", 1), item("b", 2), item("c", 3)],
        primary: Some(item("p", 9)),
        nums: vec![3, -1, 200_000],
        created: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 5,
        }),
        stamp: u64::MAX - 3,
        ratio: 0.25,
    }
}

/// `map` rebuilt in a fresh `HashMap` (a new hasher seed), filled in reverse iteration order.
fn reversed<K: Clone + Eq + Hash, V: Clone>(map: &HashMap<K, V>) -> HashMap<K, V> {
    let mut entries: Vec<(K, V)> = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    entries.reverse();
    entries.into_iter().collect()
}

/// `request` with every map, nested ones too, rebuilt by [`reversed`].
fn rebuilt(request: &Request) -> Request {
    let inners = request.inners.iter().map(|(k, v)| {
        (
            k.clone(),
            Inner {
                codes: reversed(&v.codes),
                ..v.clone()
            },
        )
    });
    Request {
        labels: reversed(&request.labels),
        inners: reversed(&inners.collect()),
        ..request.clone()
    }
}

/// The canonical bytes of an encoded `test.v1.Request`.
fn canon_bytes(schemas: &Schemas, encoded: &[u8], skip: Option<&str>) -> Vec<u8> {
    schemas
        .canonical("test.v1.Request", encoded, skip)
        .expect("a valid encoding")
}

/// The canonical bytes of `request`.
fn canon(schemas: &Schemas, request: &Request, skip: Option<&str>) -> Vec<u8> {
    canon_bytes(schemas, &request.encode_to_vec(), skip)
}

/// `value` as a varint.
fn varint(value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_varint(value, &mut out);
    out
}

/// The field `number` (below 16: a one-byte key) with a length-delimited `body`, encoded.
fn len_field(number: u8, body: &[u8]) -> Vec<u8> {
    assert!(number < 16, "a one-byte key");
    [
        vec![(number << 3) | 2],
        varint(body.len() as u64),
        body.to_vec(),
    ]
    .concat()
}

/// A string of up to four arbitrary characters.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..4).prop_map(String::from_iter)
}

/// Requests with every kind of field: maps (one whose values hold maps), lists of messages and
/// of packed scalars, a nested message, scalars.
fn requests() -> impl Strategy<Value = Request> {
    let codes = prop::collection::hash_map(any::<i32>(), text(), 0..4);
    let inners = prop::collection::hash_map(
        text(),
        (codes, text()).prop_map(|(codes, note)| Inner { codes, note }),
        0..4,
    );
    let labels = prop::collection::hash_map(text(), text(), 0..6);
    let item = || (text(), any::<i64>()).prop_map(|(sku, qty)| Item { sku, qty });
    let items = prop::collection::vec(item(), 0..4);
    let nums = prop::collection::vec(any::<i32>(), 0..4);
    (
        (text(), any::<i64>(), labels, inners),
        (items, prop::option::of(item()), nums, any::<u64>()),
    )
        .prop_map(
            |((request_id, amount, labels, inners), (items, primary, nums, stamp))| Request {
                request_id,
                amount,
                labels,
                inners,
                items,
                primary,
                nums,
                stamp,
                ..Default::default()
            },
        )
}

mod errors;
mod order;
mod previous;
