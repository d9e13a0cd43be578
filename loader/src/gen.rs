//! Synthetic data sets (PLACEHOLDER: sources helper).
