//! How often a wait with the GIL released lets Python run its signal handlers (Ctrl-C
//! raises KeyboardInterrupt within about that long): the epoch iterator's wait for a
//! batch and the map threads' for their samples.

use std::time::Duration;

/// How long one wait lasts before Python gets to run its signal handlers.
pub(crate) const POLL: Duration = Duration::from_millis(50);
