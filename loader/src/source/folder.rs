//! ImageFolder: one sub-folder per class (PLACEHOLDER: sources helper).
pub struct ImageFolder;
