//! Many rows, or many keys, as one JSON parameter that each dialect reads as
//! a table.
//!
//! Set-based writes need a statement that takes N rows. The alternatives
//! were a multi-row `VALUES (?, ?, …), (…)` list (its text changes with N, so
//! every batch size is a new prepared statement, and SQLite caps the number
//! of parameters) and array parameters (`unnest($1::text[])`: PostgreSQL
//! only, and sqlx's `Any` driver cannot bind arrays). One JSON parameter
//! works in all three dialects through `Any`, keeps the statement text the
//! same for every batch size (so it is prepared once per connection), and
//! costs one bind instead of ten per row. Each dialect has a table function
//! for it: `jsonb_to_recordset` (PostgreSQL), `JSON_TABLE` (MariaDB 10.6+,
//! MySQL 8) and `json_each` (SQLite). The flush's inserts on MySQL and
//! SQLite are the exception: there reading the JSON cost more than the
//! rows' writes, so they bind every value (see `values`).
//!
//! The named statements (`queries/`) take rows as an array of arrays, each a
//! documented struct beside its statement serialised as its fields in order
//! ([`row_as_array`]) and named by alias in the statement, and keys as an
//! array of strings ([`keys_json`]); each dialect's `README.md` there says
//! how its statements read them.

use serde::Serialize;

use super::StoreError;

/// Declares a row struct whose JSON form is an array of its fields in
/// declaration order: the named statement that reads it takes each field by
/// position and names it by alias (`r ->> 0 AS id`). Not objects read by
/// field name: PostgreSQL's `jsonb_to_recordset` cost the drain 12-20% and
/// the enqueue 17-20% (`herald bench --rows 20000`, alternating), and
/// SQLite parses an object again for every field it reads. The struct keeps
/// the fields' names and documents them; the statement's aliases repeat them.
///
/// The same struct binds its fields, in the same order, into one tuple of a
/// `VALUES` list ([`crate::store::values::BindFields`]): a batch insert is
/// one struct per row whichever form the dialect takes it in
/// ([`crate::store::values::insert`]), not a JSON struct beside a chain of
/// binds that must name the same fields in the same order.
macro_rules! row_as_array {
    ($(#[$meta:meta])* $vis:vis struct $name:ident<$lt:lifetime> {
        $($(#[$fmeta:meta])* $fvis:vis $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        $vis struct $name<$lt> {
            $($(#[$fmeta])* $fvis $field: $ty,)*
        }

        impl serde::Serialize for $name<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeTuple;
                let mut row = s.serialize_tuple(<Self as $crate::store::values::BindFields>::FIELDS)?;
                $(row.serialize_element(&self.$field)?;)*
                row.end()
            }
        }

        impl<$lt> $crate::store::values::BindFields for $name<$lt> {
            const FIELDS: usize = [$(stringify!($field)),*].len();

            fn bind_fields<'q>(self, query: $crate::store::values::AnyQuery<'q>) -> $crate::store::values::AnyQuery<'q>
            where
                Self: 'q,
            {
                query$(.bind(self.$field))*
            }
        }
    };
}
pub(crate) use row_as_array;

/// Distinct keys, sorted, as a JSON array of strings: the key list
/// parameter of the named statements that take one.
pub(crate) fn keys_json<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<String, StoreError> {
    let mut keys: Vec<&str> = keys.into_iter().collect();
    keys.sort_unstable();
    keys.dedup();
    to_json(&keys)
}

row_as_array! {
    /// One claim, as `release_claims` reads it.
    #[derive(Debug)]
    pub(crate) struct ClaimRef<'a> {
        /// The outbox row.
        pub id: &'a str,
        /// The token it was claimed under: a row claimed again since is not
        /// given back.
        pub token: &'a str,
    }
}

/// Serialises rows for a statement that reads a JSON parameter: each row
/// a [`row_as_array`] struct or a tuple (a JSON array) with the columns in
/// the order the statement names them.
pub(crate) fn to_json<T: Serialize>(rows: &[T]) -> Result<String, StoreError> {
    serde_json::to_string(rows).map_err(|e| StoreError::Encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_arrays_of_their_columns() {
        assert_eq!(to_json(&[("a", 1), ("b", 2)]).unwrap(), r#"[["a",1],["b",2]]"#);
        assert_eq!(keys_json(["b", "a", "b"]).unwrap(), r#"["a","b"]"#);
    }
}
