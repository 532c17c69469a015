//! A compact binary encoding of serde values, for the search frontier (states waiting to be
//! expanded, in memory as bytes and spilled to disk past a budget: [`super::frontier`]).
//!
//! In-house rather than a dependency: the models' states are plain structs, enums, vectors,
//! ordered maps and small integers, and this is the whole of what they need (about a tenth of a
//! full state's size in memory, where a `BTreeMap` node costs hundreds of bytes).
//!
//! Invariants:
//! - Not self-describing: a value decodes only as the type it was encoded from. The bytes
//!   never leave the process that wrote them (a spilled frontier is deleted with its run), so
//!   no format version is needed.
//! - Integers are LEB128 varints (signed ones zigzagged), a `u8` and a `bool` one byte, an enum
//!   variant its index as a varint, a sequence or map its length first; struct fields carry no
//!   names, in declaration order.
//! - Decoding checks every length and tag against the bytes left: a truncated or damaged input
//!   is an error value, never a panic or an allocation of an encoded length.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};
use std::fmt::Display;

/// Why a value could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "state encoding: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

impl ser::Error for CodecError {
    fn custom<T: Display>(message: T) -> Self {
        CodecError(message.to_string())
    }
}

impl de::Error for CodecError {
    fn custom<T: Display>(message: T) -> Self {
        CodecError(message.to_string())
    }
}

/// Appends the encoding of `value` to `out`.
pub fn encode<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    value.serialize(&mut Encoder { out })
}

/// Decodes a whole value from `bytes` (every byte must be used).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let mut decoder = Decoder { input: bytes };
    let value = T::deserialize(&mut decoder)?;
    if decoder.input.is_empty() {
        Ok(value)
    } else {
        Err(CodecError(format!(
            "{} bytes left after the value",
            decoder.input.len()
        )))
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a varint from the front of `input`, advancing it.
pub(crate) fn take_varint(input: &mut &[u8]) -> Result<u64, CodecError> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input
            .split_first()
            .ok_or_else(|| CodecError("input ends inside a number".into()))?;
        *input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(CodecError("a number longer than 64 bits".into()))
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl Encoder<'_> {
    fn varint(&mut self, value: u64) {
        put_varint(self.out, value);
    }
}

impl<'a> ser::Serializer for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, value: bool) -> Result<(), CodecError> {
        self.out.push(value as u8);
        Ok(())
    }
    fn serialize_i8(self, value: i8) -> Result<(), CodecError> {
        self.varint(zigzag(value.into()));
        Ok(())
    }
    fn serialize_i16(self, value: i16) -> Result<(), CodecError> {
        self.varint(zigzag(value.into()));
        Ok(())
    }
    fn serialize_i32(self, value: i32) -> Result<(), CodecError> {
        self.varint(zigzag(value.into()));
        Ok(())
    }
    fn serialize_i64(self, value: i64) -> Result<(), CodecError> {
        self.varint(zigzag(value));
        Ok(())
    }
    fn serialize_u8(self, value: u8) -> Result<(), CodecError> {
        self.out.push(value);
        Ok(())
    }
    fn serialize_u16(self, value: u16) -> Result<(), CodecError> {
        self.varint(value.into());
        Ok(())
    }
    fn serialize_u32(self, value: u32) -> Result<(), CodecError> {
        self.varint(value.into());
        Ok(())
    }
    fn serialize_u64(self, value: u64) -> Result<(), CodecError> {
        self.varint(value);
        Ok(())
    }
    fn serialize_f32(self, value: f32) -> Result<(), CodecError> {
        self.out.extend_from_slice(&value.to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, value: f64) -> Result<(), CodecError> {
        self.out.extend_from_slice(&value.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, value: char) -> Result<(), CodecError> {
        self.varint(u64::from(value));
        Ok(())
    }
    fn serialize_str(self, value: &str) -> Result<(), CodecError> {
        self.serialize_bytes(value.as_bytes())
    }
    fn serialize_bytes(self, value: &[u8]) -> Result<(), CodecError> {
        self.varint(value.len() as u64);
        self.out.extend_from_slice(value);
        Ok(())
    }
    fn serialize_none(self) -> Result<(), CodecError> {
        self.out.push(0);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), CodecError> {
        self.out.push(1);
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), CodecError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), CodecError> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
    ) -> Result<(), CodecError> {
        self.varint(index.into());
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        self.varint(index.into());
        value.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, CodecError> {
        let len = len.ok_or_else(|| CodecError("a sequence of unknown length".into()))?;
        self.varint(len as u64);
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, CodecError> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, CodecError> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, CodecError> {
        self.varint(index.into());
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, CodecError> {
        let len = len.ok_or_else(|| CodecError("a map of unknown length".into()))?;
        self.varint(len as u64);
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, CodecError> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, CodecError> {
        self.varint(index.into());
        Ok(self)
    }
}

impl<'a> ser::SerializeSeq for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

impl<'a> ser::SerializeTuple for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

impl<'a> ser::SerializeTupleStruct for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

impl<'a> ser::SerializeTupleVariant for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

impl<'a> ser::SerializeMap for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CodecError> {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

impl<'a> ser::SerializeStruct for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

impl<'a> ser::SerializeStructVariant for &mut Encoder<'a> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), CodecError> {
        Ok(())
    }
}

struct Decoder<'de> {
    input: &'de [u8],
}

impl<'de> Decoder<'de> {
    fn byte(&mut self) -> Result<u8, CodecError> {
        let (&byte, rest) = self
            .input
            .split_first()
            .ok_or_else(|| CodecError("input ends inside a value".into()))?;
        self.input = rest;
        Ok(byte)
    }

    fn varint(&mut self) -> Result<u64, CodecError> {
        take_varint(&mut self.input)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        if self.input.len() < N {
            return Err(CodecError("input ends inside a number".into()));
        }
        let (head, rest) = self.input.split_at(N);
        self.input = rest;
        Ok(head.try_into().expect("N bytes"))
    }

    /// A length, checked against the bytes left (every element takes at least one byte, but a
    /// unit takes none: the check is against a generous multiple, to refuse absurd lengths).
    fn length(&mut self) -> Result<usize, CodecError> {
        let len = self.varint()?;
        if len
            > (self.input.len() as u64)
                .saturating_mul(8)
                .saturating_add(64)
        {
            return Err(CodecError(format!(
                "a length of {len} with {} bytes left",
                self.input.len()
            )));
        }
        Ok(len as usize)
    }

    fn narrow<T: TryFrom<u64>>(&mut self) -> Result<T, CodecError> {
        let value = self.varint()?;
        T::try_from(value).map_err(|_| CodecError(format!("{value} does not fit its type")))
    }

    fn narrow_signed<T: TryFrom<i64>>(&mut self) -> Result<T, CodecError> {
        let value = unzigzag(self.varint()?);
        T::try_from(value).map_err(|_| CodecError(format!("{value} does not fit its type")))
    }

    fn bytes(&mut self) -> Result<&'de [u8], CodecError> {
        let len = self.varint()?;
        if len > self.input.len() as u64 {
            return Err(CodecError("input ends inside a string".into()));
        }
        let (head, rest) = self.input.split_at(len as usize);
        self.input = rest;
        Ok(head)
    }
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = CodecError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, CodecError> {
        Err(CodecError(
            "the encoding is not self-describing: a type without a fixed shape".into(),
        ))
    }
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        match self.byte()? {
            0 => visitor.visit_bool(false),
            1 => visitor.visit_bool(true),
            other => Err(CodecError(format!("{other} is not a bool"))),
        }
    }
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_i8(self.narrow_signed()?)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_i16(self.narrow_signed()?)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_i32(self.narrow_signed()?)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_i64(unzigzag(self.varint()?))
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_u8(self.byte()?)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_u16(self.narrow()?)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_u32(self.narrow()?)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_u64(self.varint()?)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_f32(f32::from_le_bytes(self.fixed()?))
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_f64(f64::from_le_bytes(self.fixed()?))
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        let value: u32 = self.narrow()?;
        let character =
            char::from_u32(value).ok_or_else(|| CodecError(format!("{value} is not a char")))?;
        visitor.visit_char(character)
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        let bytes = self.bytes()?;
        let text = std::str::from_utf8(bytes).map_err(|error| CodecError(error.to_string()))?;
        visitor.visit_borrowed_str(text)
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        self.deserialize_str(visitor)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_borrowed_bytes(self.bytes()?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        self.deserialize_bytes(visitor)
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        match self.byte()? {
            0 => visitor.visit_none(),
            1 => visitor.visit_some(self),
            other => Err(CodecError(format!("{other} is not an option tag"))),
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        visitor.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        let len = self.length()?;
        visitor.visit_seq(Elements {
            decoder: self,
            left: len,
        })
    }
    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        visitor.visit_seq(Elements {
            decoder: self,
            left: len,
        })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        self.deserialize_tuple(len, visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        let len = self.length()?;
        visitor.visit_map(Elements {
            decoder: self,
            left: len,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        self.deserialize_tuple(fields.len(), visitor)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        visitor.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, CodecError> {
        visitor.visit_u32(self.narrow()?)
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, CodecError> {
        Err(CodecError(
            "the encoding is not self-describing: a value cannot be skipped".into(),
        ))
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of a sequence, tuple, struct or map: `left` still to read.
struct Elements<'a, 'de> {
    decoder: &'a mut Decoder<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = CodecError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, CodecError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.decoder).map(Some)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_, 'de> {
    type Error = CodecError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, CodecError> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.decoder).map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, CodecError> {
        seed.deserialize(&mut *self.decoder)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Decoder<'de> {
    type Error = CodecError;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), CodecError> {
        let index: u32 = self.narrow()?;
        let value = seed.deserialize(index.into_deserializer())?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Decoder<'de> {
    type Error = CodecError;
    fn unit_variant(self) -> Result<(), CodecError> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, CodecError> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, CodecError> {
        de::Deserializer::deserialize_tuple(self, fields.len(), visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Phase {
        Ready,
        Sent { seq: u32, committed: bool },
        Failed(u8),
        Pair(i16, Option<u64>),
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Sample {
        small: u8,
        big: u64,
        negative: i32,
        text: String,
        phases: Vec<Phase>,
        map: BTreeMap<u32, BTreeSet<u8>>,
        unit: (),
        ratio: f64,
        letter: char,
    }

    fn sample() -> Sample {
        Sample {
            small: 255,
            big: u64::MAX,
            negative: -70_000,
            text: "héllo".into(),
            phases: vec![
                Phase::Ready,
                Phase::Sent {
                    seq: 300,
                    committed: true,
                },
                Phase::Failed(7),
                Phase::Pair(-1, None),
                Phase::Pair(2, Some(1 << 40)),
            ],
            map: BTreeMap::from([(1, BTreeSet::from([1, 2])), (1 << 20, BTreeSet::new())]),
            unit: (),
            ratio: 0.25,
            letter: 'ß',
        }
    }

    #[test]
    fn a_value_round_trips() {
        let mut bytes = Vec::new();
        encode(&sample(), &mut bytes).unwrap();
        assert_eq!(decode::<Sample>(&bytes).unwrap(), sample());
    }

    #[test]
    fn a_small_value_takes_few_bytes() {
        let mut bytes = Vec::new();
        encode(&(Phase::Ready, 5u32, true), &mut bytes).unwrap();
        assert_eq!(bytes, [0, 5, 1]);
    }

    #[test]
    fn damaged_input_is_an_error_never_a_panic() {
        let mut bytes = Vec::new();
        encode(&sample(), &mut bytes).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode::<Sample>(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<Sample>(&longer).is_err());
        // A huge encoded length is refused before anything is allocated for it.
        let mut huge = Vec::new();
        put_varint(&mut huge, u64::MAX >> 1);
        assert!(decode::<Vec<u8>>(&huge).is_err());
        assert!(decode::<Phase>(&[9]).is_err());
    }
}
