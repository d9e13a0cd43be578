//! stoker-loader: the data pipeline that keeps an accelerator fed.
pub mod gen;
pub mod source;
