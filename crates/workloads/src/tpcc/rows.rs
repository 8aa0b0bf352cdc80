//! TPC-C row layouts: fixed binary encodings, numbers little-endian, strings
//! fixed-width and zero-padded. Money is in integer cents (`i64`), rates
//! (taxes, discounts) in basis points (`u16`, 1/10000), dates in
//! milliseconds since the Unix epoch (`u64`, 0 = null), carrier 0 = null.
//!
//! The customer row starts with `last` and `first` and the order row with
//! `c_id`, so that the secondary-key functions read them at fixed offsets.
//!
//! Every field sits at a fixed offset, so the transactions read and change
//! single fields of an encoded row in place through the [`At`] constants
//! the `row!` macro generates (`District::NEXT_O_ID.get(row)`,
//! `Stock::QUANTITY.set(row, q)`) instead of decoding and re-encoding whole
//! rows. `decode`/`encode` stay for loading, checks and tests;
//! `encode_into`/`to_bytes` encode without allocating.

use pmtx_engine::DbError;
use std::marker::PhantomData;
use std::ops::Range;

/// A fixed-size field of a row.
pub trait Field: Sized {
    /// Encoded size in bytes.
    const SIZE: usize;
    /// Encodes into exactly [`Field::SIZE`] bytes.
    fn write(&self, out: &mut [u8]);
    /// Decodes exactly [`Field::SIZE`] bytes.
    fn read(bytes: &[u8]) -> Self;
}

macro_rules! number_field {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            const SIZE: usize = std::mem::size_of::<$ty>();
            #[inline]
            fn write(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            #[inline]
            fn read(bytes: &[u8]) -> Self {
                <$ty>::from_le_bytes(bytes.try_into().expect("field width"))
            }
        }
    )*};
}

number_field!(u8, u16, u32, u64, i32, i64);

impl<const N: usize> Field for [u8; N] {
    const SIZE: usize = N;
    #[inline]
    fn write(&self, out: &mut [u8]) {
        out.copy_from_slice(self);
    }
    #[inline]
    fn read(bytes: &[u8]) -> Self {
        bytes.try_into().expect("field width")
    }
}

/// Where a field of type `T` sits in an encoded row: typed reads and
/// in-place writes on the row's bytes, without decoding the rest.
///
/// The row must have its type's full length (check it once with
/// [`Row::check`]); a shorter slice panics, as any out-of-bounds index.
pub struct At<T> {
    offset: usize,
    field: PhantomData<fn() -> T>,
}

impl<T> Clone for At<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for At<T> {}

impl<T: Field> At<T> {
    const fn new(offset: usize) -> Self {
        Self { offset, field: PhantomData }
    }

    /// Byte offset of the field in the row.
    pub const fn offset(self) -> usize {
        self.offset
    }

    /// The field's byte range in the row.
    pub const fn range(self) -> Range<usize> {
        self.offset..self.offset + T::SIZE
    }

    /// Decodes the field of `row`.
    #[inline]
    pub fn get(self, row: &[u8]) -> T {
        T::read(&row[self.range()])
    }

    /// Encodes `value` into the field of `row`, leaving the other bytes alone.
    #[inline]
    pub fn set(self, row: &mut [u8], value: T) {
        value.write(&mut row[self.range()]);
    }

    /// The field's bytes in `row` (string fields without a copy).
    #[inline]
    pub fn bytes(self, row: &[u8]) -> &[u8] {
        &row[self.range()]
    }

    /// The field's bytes in `row`, writable.
    #[inline]
    pub fn bytes_mut(self, row: &mut [u8]) -> &mut [u8] {
        &mut row[self.range()]
    }
}

/// What every row type has: its encoded length and a name for errors.
pub trait Row {
    /// Encoded length in bytes.
    const ENCODED_LEN: usize;
    /// The row type's name (for error messages).
    const TYPE_NAME: &'static str;

    /// `Ok` if `bytes` has this row type's length, else a corruption error
    /// (checked once before field accessors index into the row).
    #[inline]
    fn check(bytes: &[u8]) -> Result<(), DbError> {
        if bytes.len() == Self::ENCODED_LEN {
            Ok(())
        } else {
            Err(DbError::Corrupt(format!(
                "tpcc {} row of {} bytes, expected {}",
                Self::TYPE_NAME,
                bytes.len(),
                Self::ENCODED_LEN
            )))
        }
    }
}

/// Defines a row type: the struct, `LEN`, one [`At`] constant per field
/// (the field name in upper case, at the sum of the sizes before it), and
/// `encode`, `encode_into`, `to_bytes`, `decode`.
macro_rules! row {
    ($(#[$doc:meta])* $name:ident { $($(#[$field_doc:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            $($(#[$field_doc])* pub $field: $ty,)*
        }

        impl $name {
            /// Encoded length in bytes.
            pub const LEN: usize = 0 $(+ <$ty as Field>::SIZE)*;

            row!(@offsets 0usize; $($(#[$field_doc])* $field: $ty,)*);

            /// Encodes the row into `out` (no allocation).
            pub fn encode_into(&self, out: &mut [u8; $name::LEN]) {
                paste::paste! {
                    $(self.$field.write(&mut out[Self::[<$field:upper>].range()]);)*
                }
            }

            /// The encoded row as an array (no allocation).
            pub fn to_bytes(&self) -> [u8; $name::LEN] {
                let mut out = [0u8; $name::LEN];
                self.encode_into(&mut out);
                out
            }

            /// Encodes the row into a new vector.
            pub fn encode(&self) -> Vec<u8> {
                self.to_bytes().to_vec()
            }

            /// Decodes a row; a value of another length is corrupt.
            pub fn decode(bytes: &[u8]) -> Result<Self, DbError> {
                <Self as Row>::check(bytes)?;
                paste::paste! {
                    Ok(Self { $($field: Self::[<$field:upper>].get(bytes),)* })
                }
            }
        }

        #[cfg(test)]
        impl $name {
            /// (field, offset, size) in declaration order.
            const LAYOUT: &'static [(&'static str, usize, usize)] = paste::paste! {
                &[$((stringify!($field), Self::[<$field:upper>].offset(), <$ty as Field>::SIZE),)*]
            };

            /// Panics unless every accessor agrees with `decode` and
            /// `encode` on `bytes` (a whole row).
            fn assert_accessors_agree(bytes: &[u8]) {
                let row = Self::decode(bytes).expect("a row of the right length");
                assert_eq!(row.encode(), bytes, "{}: encode(decode(bytes))", stringify!($name));
                let mut built = [0u8; $name::LEN];
                paste::paste! {$(
                    assert_eq!(
                        Self::[<$field:upper>].get(bytes),
                        row.$field,
                        "{}::{}",
                        stringify!($name),
                        stringify!($field)
                    );
                    Self::[<$field:upper>].set(&mut built, row.$field.clone());
                )*}
                assert_eq!(&built[..], bytes, "{}: every field set on a zeroed row", stringify!($name));
            }
        }

        impl Row for $name {
            const ENCODED_LEN: usize = $name::LEN;
            const TYPE_NAME: &'static str = stringify!($name);
        }
    };
    (@offsets $at:expr;) => {};
    (@offsets $at:expr; $(#[$field_doc:meta])* $field:ident: $ty:ty, $($rest:tt)*) => {
        paste::paste! {
            $(#[$field_doc])*
            pub const [<$field:upper>]: At<$ty> = At::new($at);
        }
        row!(@offsets $at + <$ty as Field>::SIZE; $($rest)*);
    };
}

row!(
    /// WAREHOUSE.
    Warehouse {
        /// W_NAME.
        name: [u8; 10],
        /// W_STREET_1.
        street_1: [u8; 20],
        /// W_STREET_2.
        street_2: [u8; 20],
        /// W_CITY.
        city: [u8; 20],
        /// W_STATE.
        state: [u8; 2],
        /// W_ZIP.
        zip: [u8; 9],
        /// W_TAX in basis points.
        tax: u16,
        /// W_YTD in cents.
        ytd: i64,
    }
);

row!(
    /// DISTRICT.
    District {
        /// D_NAME.
        name: [u8; 10],
        /// D_STREET_1.
        street_1: [u8; 20],
        /// D_STREET_2.
        street_2: [u8; 20],
        /// D_CITY.
        city: [u8; 20],
        /// D_STATE.
        state: [u8; 2],
        /// D_ZIP.
        zip: [u8; 9],
        /// D_TAX in basis points.
        tax: u16,
        /// D_YTD in cents.
        ytd: i64,
        /// D_NEXT_O_ID.
        next_o_id: u32,
    }
);

row!(
    /// CUSTOMER (`last` and `first` first: the name index reads them).
    Customer {
        /// C_LAST.
        last: [u8; 16],
        /// C_FIRST.
        first: [u8; 16],
        /// C_MIDDLE.
        middle: [u8; 2],
        /// C_STREET_1.
        street_1: [u8; 20],
        /// C_STREET_2.
        street_2: [u8; 20],
        /// C_CITY.
        city: [u8; 20],
        /// C_STATE.
        state: [u8; 2],
        /// C_ZIP.
        zip: [u8; 9],
        /// C_PHONE.
        phone: [u8; 16],
        /// C_SINCE (ms).
        since: u64,
        /// C_CREDIT ("GC" or "BC").
        credit: [u8; 2],
        /// C_CREDIT_LIM in cents.
        credit_lim: i64,
        /// C_DISCOUNT in basis points.
        discount: u16,
        /// C_BALANCE in cents.
        balance: i64,
        /// C_YTD_PAYMENT in cents.
        ytd_payment: i64,
        /// C_PAYMENT_CNT.
        payment_cnt: u32,
        /// C_DELIVERY_CNT.
        delivery_cnt: u32,
        /// C_DATA.
        data: [u8; 500],
    }
);

row!(
    /// HISTORY.
    History {
        /// H_C_ID.
        c_id: u32,
        /// H_C_D_ID.
        c_d_id: u8,
        /// H_C_W_ID.
        c_w_id: u32,
        /// H_D_ID.
        d_id: u8,
        /// H_W_ID.
        w_id: u32,
        /// H_DATE (ms).
        date: u64,
        /// H_AMOUNT in cents.
        amount: i64,
        /// H_DATA.
        data: [u8; 24],
    }
);

row!(
    /// ORDER (`c_id` first: the by-customer index reads it).
    Order {
        /// O_C_ID.
        c_id: u32,
        /// O_ENTRY_D (ms).
        entry_d: u64,
        /// O_CARRIER_ID (0 = null).
        carrier_id: u8,
        /// O_OL_CNT.
        ol_cnt: u8,
        /// O_ALL_LOCAL.
        all_local: u8,
    }
);

row!(
    /// ORDER-LINE.
    OrderLine {
        /// OL_I_ID.
        i_id: u32,
        /// OL_SUPPLY_W_ID.
        supply_w_id: u32,
        /// OL_DELIVERY_D (ms, 0 = null).
        delivery_d: u64,
        /// OL_QUANTITY.
        quantity: u8,
        /// OL_AMOUNT in cents.
        amount: i64,
        /// OL_DIST_INFO.
        dist_info: [u8; 24],
    }
);

row!(
    /// ITEM.
    Item {
        /// I_IM_ID.
        im_id: u32,
        /// I_PRICE in cents.
        price: i64,
        /// I_NAME.
        name: [u8; 24],
        /// I_DATA.
        data: [u8; 50],
    }
);

row!(
    /// STOCK.
    Stock {
        /// S_QUANTITY.
        quantity: i32,
        /// S_YTD.
        ytd: u32,
        /// S_ORDER_CNT.
        order_cnt: u32,
        /// S_REMOTE_CNT.
        remote_cnt: u32,
        /// S_DIST_01 .. S_DIST_10, 24 bytes each.
        dist: [u8; 240],
        /// S_DATA.
        data: [u8; 50],
    }
);

/// NEW-ORDER rows carry no value (the key is the row).
pub const NEW_ORDER_VALUE: &[u8] = &[];

impl Stock {
    /// S_DIST_xx of district `d` (1..=10).
    pub fn dist_info(&self, d: u8) -> [u8; 24] {
        let start = (d as usize - 1) * 24;
        self.dist[start..start + 24].try_into().expect("24 bytes")
    }

    /// S_DIST_xx of district `d` (1..=10) in an encoded stock row.
    #[inline]
    pub fn dist_info_in(row: &[u8], d: u8) -> &[u8] {
        let start = Self::DIST.offset() + (d as usize - 1) * 24;
        &row[start..start + 24]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};

    /// Checks one row type: fields laid end to end in declaration order
    /// from offset 0 to `LEN` (the encoding of earlier versions, so old
    /// pools still decode), and accessors that agree with encode/decode on
    /// random rows.
    macro_rules! check_row {
        ($($name:ident),*) => {$({
            let mut at = 0;
            for &(field, offset, size) in $name::LAYOUT {
                assert_eq!(offset, at, "{}::{field}", stringify!($name));
                at += size;
            }
            assert_eq!(at, $name::LEN, "{}", stringify!($name));
            assert_eq!(<$name as Row>::ENCODED_LEN, $name::LEN);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            for _ in 0..64 {
                let mut bytes = [0u8; $name::LEN];
                rng.fill_bytes(&mut bytes);
                $name::assert_accessors_agree(&bytes);
                let row = $name::decode(&bytes).unwrap();
                assert_eq!(row.to_bytes(), bytes);
                let mut into = [0xAAu8; $name::LEN];
                row.encode_into(&mut into);
                assert_eq!(into, bytes);
            }
            let short = vec![0u8; $name::LEN - 1];
            assert!(matches!($name::decode(&short), Err(DbError::Corrupt(_))));
            assert!(<$name as Row>::check(&short).is_err());
        })*};
    }

    #[test]
    fn accessors_agree_with_encode_and_decode_for_every_row_type() {
        check_row!(Warehouse, District, Customer, History, Order, OrderLine, Item, Stock);
    }

    #[test]
    fn encoding_is_little_endian_in_declaration_order() {
        let order = Order { c_id: 0x0102_0304, entry_d: 5, carrier_id: 6, ol_cnt: 7, all_local: 1 };
        assert_eq!(order.encode(), [4, 3, 2, 1, 5, 0, 0, 0, 0, 0, 0, 0, 6, 7, 1]);
        let mut row = order.to_bytes();
        Order::CARRIER_ID.set(&mut row, 9);
        assert_eq!(row[12], 9);
        assert_eq!(Order::decode(&row).unwrap(), Order { carrier_id: 9, ..order });
        assert_eq!((Customer::LAST.offset(), Customer::FIRST.offset()), (0, 16), "the name index reads them here");
    }

    #[test]
    fn stock_dist_info_in_place_matches_the_decoded_row() {
        let mut bytes = [0u8; Stock::LEN];
        rand_chacha::ChaCha8Rng::seed_from_u64(3).fill_bytes(&mut bytes);
        let stock = Stock::decode(&bytes).unwrap();
        for d in 1..=10 {
            assert_eq!(Stock::dist_info_in(&bytes, d), stock.dist_info(d));
        }
    }
}
