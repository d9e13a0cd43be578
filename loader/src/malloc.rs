//! The C allocator's settings for programs that decode images of very different sizes.
//!
//! glibc maps allocations from a threshold on (128 KiB at first) and unmaps them when
//! freed, but raises the threshold to the size of each mapped block freed, up to 32
//! MiB. After a few very large images (whose buffers stoker releases, see
//! `stoker_augment::retain`), buffers of a few MiB come from the heap instead, stay
//! there when freed, and the resident memory creeps up epoch after epoch: the soak
//! benchmark showed it (`benches/RESULTS.md`, "Soak"). Fixing the threshold keeps it
//! flat. It is the program's allocator, so the library never changes it: the binaries
//! call [`release_large_blocks`] once at start.

/// Fixes glibc's mapping threshold at 1 MiB, so that every block from 1 MiB on goes
/// back to the system when freed. Does nothing where the C library is not glibc, or
/// when the user set `MALLOC_MMAP_THRESHOLD_` (their choice wins). Returns whether it
/// changed the setting.
pub fn release_large_blocks() -> bool {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes the allocator's parameters; it is called before
        // the program starts its threads.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glibc_takes_the_setting() {
        let expected = cfg!(all(target_os = "linux", target_env = "gnu"))
            && std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none();
        assert_eq!(super::release_large_blocks(), expected);
    }
}
