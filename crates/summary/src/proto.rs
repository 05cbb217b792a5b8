//! The messages of TensorBoard's event files (`tensorboard/compat/proto/event.proto`,
//! `summary.proto`, `graph.proto`, `node_def.proto`), declared with prost's derive
//! with the same field numbers, for the fields Spore writes. Unknown fields stay
//! absent, which protobuf readers accept.
//!
//! ```
//! use prost::Message;
//! use spore_summary::proto::{Event, What};
//! let e = Event { wall_time: 1.5, step: 3, what: Some(What::FileVersion("brain.Event:2".into())) };
//! let back = Event::decode(e.encode_to_vec().as_slice()).unwrap();
//! assert_eq!(back, e);
//! ```

/// One record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "What", tags = "3, 4, 5")]
    pub what: Option<What>,
}

/// What an event carries.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// The first event of a file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// A serialized [`GraphDef`].
    #[prost(bytes, tag = "4")]
    GraphDef(Vec<u8>),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

/// One tagged value of a summary.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(oneof = "Kind", tags = "2, 4, 5")]
    pub kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "4")]
    Image(Image),
    #[prost(message, tag = "5")]
    Histo(HistogramProto),
}

/// An encoded (PNG) image.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Image {
    #[prost(int32, tag = "1")]
    pub height: i32,
    #[prost(int32, tag = "2")]
    pub width: i32,
    /// 1 grey, 3 RGB, 4 RGBA.
    #[prost(int32, tag = "3")]
    pub colorspace: i32,
    #[prost(bytes = "vec", tag = "4")]
    pub encoded_image_string: Vec<u8>,
}

/// Bucket `i` counts the values in `(bucket_limit[i - 1], bucket_limit[i]]`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramProto {
    #[prost(double, tag = "1")]
    pub min: f64,
    #[prost(double, tag = "2")]
    pub max: f64,
    #[prost(double, tag = "3")]
    pub num: f64,
    #[prost(double, tag = "4")]
    pub sum: f64,
    #[prost(double, tag = "5")]
    pub sum_squares: f64,
    #[prost(double, repeated, tag = "6")]
    pub bucket_limit: Vec<f64>,
    #[prost(double, repeated, tag = "7")]
    pub bucket: Vec<f64>,
}

/// A graph as TensorBoard's Graphs tab reads it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    /// The scope name (`Default/conv1/Conv2D-op0`): TensorBoard groups by `/`.
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub op: String,
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
}
