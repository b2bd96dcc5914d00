//! A gRPC request message for the fingerprint bench (`grpc-<size>`) and its allocation test: a charge with line items
//! and a `map<string, string>` of metadata (which prost keeps in a `HashMap`, so the canonical
//! encoding sorts its entries), and the descriptor set a build script would have written for it.

use std::collections::HashMap;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
};

/// `bench.v1.Item`.
#[derive(Clone, PartialEq, Message)]
pub struct Item {
    /// The product.
    #[prost(string, tag = "1")]
    pub sku: String,
    /// How many.
    #[prost(int64, tag = "2")]
    pub quantity: i64,
    /// The price of one, in cents.
    #[prost(int64, tag = "3")]
    pub unit_amount: i64,
}

/// `bench.v1.CreateChargeRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct CreateChargeRequest {
    /// The amount charged, in cents.
    #[prost(int64, tag = "1")]
    pub amount: i64,
    /// Its currency.
    #[prost(string, tag = "2")]
    pub currency: String,
    /// Who is charged.
    #[prost(string, tag = "3")]
    pub customer: String,
    /// What is bought.
    #[prost(message, repeated, tag = "4")]
    pub items: Vec<Item>,
    /// The caller's notes, a `map<string, string>`.
    #[prost(map = "string, string", tag = "5")]
    pub metadata: HashMap<String, String>,
}

impl prost::Name for CreateChargeRequest {
    const NAME: &'static str = "CreateChargeRequest";
    const PACKAGE: &'static str = "bench.v1";
}

/// A request whose encoding is at most `len` bytes (but holds at least one item): items are
/// added while they fit, after three metadata entries.
pub fn request(len: usize) -> CreateChargeRequest {
    let mut request = CreateChargeRequest {
        amount: 4200,
        currency: "usd".into(),
        customer: "cus_9s6XKzkNRiz8i3".into(),
        items: Vec::new(),
        metadata: [
            ("order", "6735"),
            ("channel", "web"),
            ("campaign", "winter"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    };
    // Each item adds its key, its length's one byte and its body: counted as it is added, not
    // by encoding the whole request again.
    let mut size = request.encoded_len();
    for i in 0.. {
        let item = Item {
            sku: format!("sku_{i:05}"),
            quantity: i % 7 + 1,
            unit_amount: 199 + i * 13 % 1000,
        };
        let grown = size + 2 + item.encoded_len();
        if grown > len && !request.items.is_empty() {
            break;
        }
        size = grown;
        request.items.push(item);
    }
    assert_eq!(
        request.encoded_len(),
        size,
        "an item: its key, one byte of length, its body"
    );
    request
}

fn field(
    name: &str,
    number: i32,
    ty: Type,
    repeated: bool,
    type_name: Option<&str>,
) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(if repeated {
            Label::Repeated
        } else {
            Label::Optional
        } as i32),
        r#type: Some(ty as i32),
        type_name: type_name.map(Into::into),
        ..Default::default()
    }
}

/// The encoded descriptor set of `bench.v1`, as `file_descriptor_set_path` writes it.
pub fn descriptors() -> Vec<u8> {
    let item = DescriptorProto {
        name: Some("Item".into()),
        field: vec![
            field("sku", 1, Type::String, false, None),
            field("quantity", 2, Type::Int64, false, None),
            field("unit_amount", 3, Type::Int64, false, None),
        ],
        ..Default::default()
    };
    let entry = DescriptorProto {
        name: Some("MetadataEntry".into()),
        field: vec![
            field("key", 1, Type::String, false, None),
            field("value", 2, Type::String, false, None),
        ],
        options: Some(MessageOptions {
            map_entry: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let request = DescriptorProto {
        name: Some("CreateChargeRequest".into()),
        field: vec![
            field("amount", 1, Type::Int64, false, None),
            field("currency", 2, Type::String, false, None),
            field("customer", 3, Type::String, false, None),
            field("items", 4, Type::Message, true, Some(".bench.v1.Item")),
            field(
                "metadata",
                5,
                Type::Message,
                true,
                Some(".bench.v1.CreateChargeRequest.MetadataEntry"),
            ),
        ],
        nested_type: vec![entry],
        ..Default::default()
    };
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("bench/v1/charges.proto".into()),
            package: Some("bench.v1".into()),
            message_type: vec![item, request],
            syntax: Some("proto3".into()),
            ..Default::default()
        }],
    }
    .encode_to_vec()
}
