//! cifar (PLACEHOLDER: sources helper).
pub struct Cifar10;
