//! Reading a result row into a tuple: one conversion for every compiled-in query that takes
//! its columns in order (`stmt.query_map(params, causeway_store::row)`), instead of a closure
//! listing `r.get(0)?, r.get(1)?, ...` at each call site. duckdb-rs converts single values
//! (`FromSql`) but not rows into tuples, hence this small trait.

use duckdb::Row;
use duckdb::types::FromSql;

/// A value built from the columns of a row, in order.
pub trait FromRow: Sized {
    /// Reads column 0, 1, ... of `r`.
    fn from_row(r: &Row<'_>) -> duckdb::Result<Self>;
}

macro_rules! tuple_from_row {
    ($($t:ident $i:tt),+) => {
        impl<$($t: FromSql),+> FromRow for ($($t,)+) {
            fn from_row(r: &Row<'_>) -> duckdb::Result<Self> {
                Ok(($(r.get::<_, $t>($i)?,)+))
            }
        }
    };
}

tuple_from_row!(A 0, B 1);
tuple_from_row!(A 0, B 1, C 2);
tuple_from_row!(A 0, B 1, C 2, D 3);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);

/// The row as a tuple: pass it to `query_map` / `query_row` where a closure would list the
/// columns in order.
pub fn row<T: FromRow>(r: &Row<'_>) -> duckdb::Result<T> {
    T::from_row(r)
}
