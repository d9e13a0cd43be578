//! The flags every command that reads data shares: the split of an MNIST/CIFAR set,
//! and how a data set is opened (`stoker_loader::cli_args::OpenArgs`, the same flags
//! as stoker-train's); they become the library's [`OpenOptions`].

use stoker_loader::cli_args::OpenArgs;
use stoker_loader::source::OpenOptions;

#[derive(clap::Args, Clone, Debug)]
pub struct DataArgs {
    /// Use the test split of an MNIST/CIFAR set.
    #[arg(long)]
    pub test: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

impl DataArgs {
    pub fn options(&self) -> OpenOptions {
        self.open.options(!self.test)
    }
}
