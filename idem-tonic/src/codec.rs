//! [`ProstCodec`]: tonic-prost's codec, with a request that is not a valid protobuf message
//! answered `INVALID_ARGUMENT` rather than `INTERNAL`.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// `tonic_prost::ProstCodec` with one difference: a message that does not decode is
/// `INVALID_ARGUMENT`, not `INTERNAL`.
///
/// tonic-prost answers bytes that are not a valid encoding of the request message with
/// `INTERNAL` ("failed to decode Protobuf message"): a code that says the server is at fault,
/// and that some clients and retry policies retry. Such a request can never succeed, so this
/// codec answers it `INVALID_ARGUMENT`, naming the message type and prost's reason. The engine
/// never sees the call: nothing is claimed, stored or run. Encoding, and decoding what does
/// decode, are tonic-prost's own.
///
/// Select it with tonic-build's `codec_path` in the build script that generates the service:
///
/// ```ignore
/// tonic_prost_build::configure()
///     .codec_path("idem_runtime::grpc::ProstCodec") // through the facade, as applications depend on it
///     .compile_protos(&["proto/ledger/v1/ledger.proto"], &["proto"])?;
/// ```
///
/// The generated client uses the codec too: its requests are encoded as tonic-prost encodes
/// them, and a reply that does not decode (a server that sent another message) is reported as
/// `INVALID_ARGUMENT` with the same words rather than `INTERNAL`; neither is retryable.
#[derive(Debug, Clone)]
pub struct ProstCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for ProstCodec<T, U> {
    fn default() -> Self {
        Self {
            _messages: PhantomData,
        }
    }
}

impl<T, U> Codec for ProstCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder {
            _message: PhantomData,
        }
    }
}

/// The [`Decoder`] of [`ProstCodec`]: decodes a `U`, and answers a message that does not decode
/// `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct ProstDecoder<U> {
    _message: PhantomData<U>,
}

impl<U: Message + Default> Decoder for ProstDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|error| undecodable::<U>(&error))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// The status for a message that is not a valid encoding of `U`.
fn undecodable<U>(error: &prost::DecodeError) -> Status {
    let message = std::any::type_name::<U>();
    let message = message.rsplit("::").next().unwrap_or(message);
    Status::invalid_argument(format!(
        "the message is not a valid protobuf encoding of `{message}`: {error}"
    ))
}
