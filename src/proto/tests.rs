#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Float64Type;
use prost_reflect::{DynamicMessage, Value};

use super::*;

const WEATHER: &str = r#"
syntax = "proto3";
package weather;
enum Sky { SKY_UNKNOWN = 0; CLEAR = 1; CLOUDY = 2; }
message Position { double lat = 1; double lon = 2; }
message Reading {
  int64 pressure = 1;
  double temperature = 2;
  sint32 humidity = 3;
  uint32 altitude = 4;
  Sky sky = 5;
  Position position = 6;
  repeated float winds = 7;
  map<string, string> tags = 8;
  optional string note = 9;
  bytes raw = 10;
  repeated Position track = 11;
}
"#;

fn registry() -> ProtoRegistry {
    ProtoRegistry::compile(BTreeMap::from([(
        "weather.proto".to_string(),
        WEATHER.to_string(),
    )]))
    .unwrap()
}

fn sample(desc: &MessageDescriptor) -> Vec<u8> {
    let mut m = DynamicMessage::new(desc.clone());
    m.set_field_by_name("pressure", Value::I64(94558));
    m.set_field_by_name("temperature", Value::F64(9.6));
    m.set_field_by_name("humidity", Value::I32(-61));
    m.set_field_by_name("altitude", Value::U32(612));
    m.set_field_by_name("sky", Value::EnumNumber(2));
    let pos_desc = registry().message("weather.Position").unwrap();
    let mut pos = DynamicMessage::new(pos_desc);
    pos.set_field_by_name("lat", Value::F64(37.4));
    pos.set_field_by_name("lon", Value::F64(-122.1));
    m.set_field_by_name("position", Value::Message(pos.clone()));
    m.set_field_by_name("winds", Value::List(vec![Value::F32(1.5), Value::F32(2.5)]));
    m.set_field_by_name(
        "tags",
        Value::Map([(MapKey::String("site".into()), Value::String("a".into()))].into()),
    );
    m.set_field_by_name("track", Value::List(vec![Value::Message(pos)]));
    prost_reflect::prost::Message::encode_to_vec(&m)
}

use prost_reflect::MapKey;

#[test]
fn decodes_every_kind_and_round_trips_through_arrow() {
    let desc = registry().message("weather.Reading").unwrap();
    let bytes = sample(&desc);
    let value = decode(&desc, &bytes, &FieldMask::all()).unwrap();
    let PValue::Message(fields) = &value else {
        panic!("{value:?}")
    };
    assert_eq!(fields[0], PValue::I64(94558));
    assert_eq!(fields[2], PValue::I32(-61));
    assert_eq!(fields[4], PValue::Str("CLOUDY".into()));
    assert_eq!(
        fields[6],
        PValue::List(vec![PValue::F32(1.5), PValue::F32(2.5)])
    );
    assert_eq!(fields[8], PValue::Null, "optional and absent");
    assert_eq!(fields[9], PValue::Bytes(Vec::new()), "proto3 default");
    let array = to_array(&message_type(&desc), &[value.clone(), PValue::Null]).unwrap();
    assert_eq!(array.len(), 2);
    assert!(array.is_null(1));
    let position = array
        .as_struct()
        .column_by_name("position")
        .unwrap()
        .as_struct();
    let lat = position
        .column_by_name("lat")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(lat.value(0), 37.4);
    // Arrow back to protobuf gives the same message.
    let again = encode(&desc, &array, 0).unwrap();
    assert_eq!(decode(&desc, &again, &FieldMask::all()).unwrap(), value);
}

#[test]
fn a_mask_skips_fields() {
    let desc = registry().message("weather.Reading").unwrap();
    let bytes = sample(&desc);
    let mut mask = FieldMask {
        fields: Some(Default::default()),
    };
    mask.add_path(&["position".into(), "lon".into()]);
    mask.add_path(&["pressure".into()]);
    let PValue::Message(fields) = decode(&desc, &bytes, &mask).unwrap() else {
        panic!()
    };
    assert_eq!(fields[0], PValue::I64(94558));
    assert_eq!(fields[1], PValue::Null, "temperature not decoded");
    let PValue::Message(position) = &fields[5] else {
        panic!("{:?}", fields[5])
    };
    assert_eq!(position[0], PValue::Null);
    assert_eq!(position[1], PValue::F64(-122.1));
    assert_eq!(mask.describe(), "{position.{lon}, pressure}");
}

#[test]
fn malformed_bytes_are_errors_never_panics() {
    let desc = registry().message("weather.Reading").unwrap();
    let good = sample(&desc);
    for bad in [
        vec![0xff],
        vec![0x08],
        vec![0x0a, 0x05, 0x01],
        vec![0x00, 0x01],
        vec![0x0b],
        vec![0x12, 0x01, 0x00],
        vec![0x80; 11],
    ] {
        let e = decode(&desc, &bad, &FieldMask::all())
            .unwrap_err()
            .to_string();
        assert!(e.contains("malformed weather.Reading"), "{e}");
    }
    // Every truncation and every single-byte corruption: an answer or an
    // error, never a panic.
    for n in 0..good.len() {
        let _ = decode(&desc, &good[..n], &FieldMask::all());
        let mut flipped = good.clone();
        flipped[n] ^= 0xa5;
        let _ = decode(&desc, &flipped, &FieldMask::all());
    }
}

#[test]
fn bad_sources_and_unknown_types_are_named() {
    let e = ProtoRegistry::compile(BTreeMap::from([(
        "x.proto".to_string(),
        "syntax = \"proto3\"; message { }".to_string(),
    )]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("x.proto"), "{e}");
    let e = registry().message("weather.Nope").unwrap_err().to_string();
    assert!(
        e.contains("weather.Nope") && e.contains("weather.Reading"),
        "{e}"
    );
}
