//! The checks `grpc::service` makes on each marked method, and what it leaves in the `impl`.

use super::*;
use crate::validate::lit;

fn method(tokens: &str) -> ImplItemFn {
    syn::parse_str(tokens).unwrap()
}

const UNARY: &str = "async fn create(&self, request: tonic::Request<CreateCharge>) \
                     -> Result<tonic::Response<Charge>, tonic::Status> { todo!() }";

#[test]
fn metadata_keys_are_lowercase_ascii_and_not_binary() {
    let name = |value: &str| metadata_name(&Arg { value: lit(value) }).map_err(|e| e.to_string());
    for ok in ["idempotency-key", "x_request.id", "k1", "9"] {
        assert_eq!(name(ok).as_deref(), Ok(ok));
    }
    for bad in ["", "Idempotency-Key", "key-bin", "two words", "clé"] {
        let err = name(bad).unwrap_err();
        assert!(
            err.contains("is not an ASCII metadata key"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn a_config_needs_a_scope_and_a_key_source_and_reads_each_choice() {
    let read = |tokens: &str| {
        let args = syn::parse_str::<Args>(tokens).unwrap();
        config(args, &method(UNARY)).map_err(|e| e.to_string())
    };
    let field = read(r#"scope = "tenant", key_field = "request_id""#).unwrap();
    assert_eq!(
        field.key_field.map(|f| f.to_string()).as_deref(),
        Some("request_id")
    );
    assert_eq!(
        (
            field.key_required,
            field.wait,
            field.one_commit,
            field.ttl_secs
        ),
        (false, false, false, 86_400)
    );
    let all = r#"scope = "tenant", key_metadata = "x-key", key = "required",
                 in_flight = "wait", commits = "one", ttl = "1h", name = "charges.create""#;
    let all = read(all).unwrap();
    assert_eq!(
        (all.key_required, all.wait, all.one_commit, all.ttl_secs),
        (true, true, true, 3_600)
    );
    assert_eq!(all.key_metadata.as_deref(), Some("x-key"));
    assert_eq!(all.name.as_deref(), Some("charges.create"));
    let err = read(r#"scope = "tenant""#).err().unwrap();
    assert!(err.contains("needs a key source"), "{err}");
    let err = read(r#"key_field = "request_id""#).err().unwrap();
    assert!(err.contains("needs a scope"), "{err}");
}

#[test]
fn the_method_is_unary_and_borrows_its_service() {
    assert!(request(&method(UNARY)).is_ok());
    for shape in [
        UNARY.replace("&self", "&mut self"),
        UNARY.replace("&self", "self"),
        UNARY.replace("tonic::Request<", "tonic::Response<"),
        UNARY.replace("CreateCharge", "tonic::Streaming<CreateCharge>"),
        UNARY.replace(", request: tonic::Request<CreateCharge>", ""),
        "async fn create(&self, request: tonic::Request<CreateCharge>) { todo!() }".into(),
        UNARY.replace("async fn", "fn"),
    ] {
        let err = request(&method(&shape)).err().unwrap().to_string();
        assert!(
            err.starts_with("an idempotent tonic method is `async fn"),
            "{shape}: {err}"
        );
    }
}

#[test]
fn a_marked_method_outside_a_service_is_told_where_the_attribute_goes() {
    let outside =
        |tokens: &str| method_outside_service(&tokens.parse().unwrap()).map(|e| e.to_string());
    // As tonic's trait declares it, and as `#[tonic::async_trait]` rewrites it.
    let sync = UNARY.replace("async fn", "fn");
    for plain in [UNARY, sync.as_str()] {
        let plain = outside(plain).expect("a method taking a tonic request");
        assert!(
            plain.contains("needs `#[idem_runtime::grpc::service]`"),
            "{plain}"
        );
        assert!(!plain.contains("(which rewrites"), "not desugared: {plain}");
    }
    let desugared = outside(
        "fn create<'a>(&'a self, request: Req) \
         -> Pin<Box<dyn Future<Output = Result<R, S>> + Send + 'a>> { todo!() }",
    )
    .expect("an async_trait method");
    assert!(
        desugared.contains("(which rewrites the methods"),
        "{desugared}"
    );
    // Anything else gets the attribute's ordinary errors.
    for other in [
        "async fn helper(&self, n: u32) -> u32 { n }",
        "async fn free(request: tonic::Request<M>) -> R { todo!() }",
        "async fn boxed(&self) -> Pin<Box<dyn Future<Output = ()>>> { todo!() }",
        "struct NotAMethod;",
    ] {
        assert_eq!(outside(other), None, "{other}");
    }
}

#[test]
fn markers_are_found_by_their_last_segment() {
    for marked in [
        "#[idempotent]",
        "#[idem_runtime::idempotent(scope = \"t\")]",
    ] {
        assert!(is_idempotent(&attr(marked)), "{marked}");
    }
    for other in [
        "#[tonic::async_trait]",
        "#[doc = \"idempotent\"]",
        "#[idempotent_not]",
    ] {
        assert!(!is_idempotent(&attr(other)), "{other}");
    }
}

/// The attribute `tokens` spells, e.g. `#[idempotent]`.
fn attr(tokens: &str) -> Attribute {
    let item: syn::ItemStruct = syn::parse_str(&format!("{tokens} struct S;")).unwrap();
    item.attrs.into_iter().next().unwrap()
}

#[test]
fn the_service_keeps_its_impl_and_rewrites_only_marked_methods() {
    let block: TokenStream = format!(
        "impl Payments for Api {{ \
           #[idempotent(scope = \"tenant\", key_field = \"request_id\")] {UNARY} \
           async fn refund(&self, request: tonic::Request<Refund>) \
             -> Result<tonic::Response<Refunded>, tonic::Status> {{ todo!() }} \
         }}"
    )
    .parse()
    .unwrap();
    let out = service(TokenStream::new(), block.clone()).to_string();
    assert!(out.starts_with("impl Payments for Api"), "{out}");
    assert!(!out.contains("compile_error"), "{out}");
    assert_eq!(
        out.matches(EXPANDED).count(),
        1,
        "the marker, rewritten: {out}"
    );
    assert!(out.contains("__private"), "the engine is called: {out}");
    assert!(out.contains("fn refund"), "{out}");

    let with_args = service("scope = \"tenant\"".parse().unwrap(), block).to_string();
    assert!(with_args.contains("compile_error"), "{with_args}");
    assert!(with_args.contains("takes no arguments"), "{with_args}");
}

#[test]
fn methods_are_named_as_grpc_names_them() {
    assert_eq!(camel("create_transfer"), "CreateTransfer");
    assert_eq!(camel("get"), "Get");
    assert_eq!(camel("r#type"), "Type");
}

#[test]
fn self_becomes_the_clone_except_in_paths() {
    let body = quote!({ self.db.get(self::helper(&self)).await });
    let replaced = replace_self(body).to_string();
    assert_eq!(
        replaced,
        quote!({ __idem_self.db.get(self::helper(&__idem_self)).await }).to_string()
    );
}
