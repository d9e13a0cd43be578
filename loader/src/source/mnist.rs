//! mnist (PLACEHOLDER: sources helper).
pub struct Mnist;
