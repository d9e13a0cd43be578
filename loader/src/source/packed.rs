//! packed (PLACEHOLDER: sources helper).
pub struct PackedReader;
pub struct PackedWriter;
