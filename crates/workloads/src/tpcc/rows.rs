//! TPC-C row layouts: fixed binary encodings, numbers little-endian, strings
//! fixed-width and zero-padded. Money is in integer cents (`i64`), rates
//! (taxes, discounts) in basis points (`u16`, 1/10000), dates in
//! milliseconds since the Unix epoch (`u64`, 0 = null), carrier 0 = null.
//!
//! The customer row starts with `last` and `first` and the order row with
//! `c_id`, so that the secondary-key functions read them at fixed offsets.

use pmtx_engine::DbError;

/// A fixed-size field of a row.
pub trait Field: Sized {
    /// Encoded size in bytes.
    const SIZE: usize;
    /// Appends the encoding.
    fn put(&self, out: &mut Vec<u8>);
    /// Decodes exactly [`Field::SIZE`] bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! number_field {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            const SIZE: usize = std::mem::size_of::<$ty>();
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                <$ty>::from_le_bytes(bytes.try_into().expect("field width"))
            }
        }
    )*};
}

number_field!(u8, u16, u32, u64, i32, i64);

impl<const N: usize> Field for [u8; N] {
    const SIZE: usize = N;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn get(bytes: &[u8]) -> Self {
        bytes.try_into().expect("field width")
    }
}

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

            /// Encodes the row.
            pub fn encode(&self) -> Vec<u8> {
                let mut out = Vec::with_capacity(Self::LEN);
                $(self.$field.put(&mut out);)*
                debug_assert_eq!(out.len(), Self::LEN);
                out
            }

            /// Decodes a row; a value of another length is corrupt.
            #[allow(unused_assignments)]
            pub fn decode(bytes: &[u8]) -> Result<Self, DbError> {
                if bytes.len() != Self::LEN {
                    return Err(DbError::Corrupt(format!(
                        "tpcc {} row of {} bytes, expected {}",
                        stringify!($name),
                        bytes.len(),
                        Self::LEN
                    )));
                }
                let mut at = 0;
                $(
                    let $field = <$ty as Field>::get(&bytes[at..at + <$ty as Field>::SIZE]);
                    at += <$ty as Field>::SIZE;
                )*
                Ok(Self { $($field,)* })
            }
        }
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
}
