//! Positioned reads of local files (`pread`): the packed reader, tar shards and the
//! remote cache read records by offset without a shared file cursor, and see a file
//! that ends early as `Ok(false)` instead of a fault (as a memory map would give).

use std::fs::File;

/// Fill `buf` from `file` at `offset`; `Ok(false)` when the file ends first.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<bool> {
    #[cfg(unix)]
    let res = std::os::unix::fs::FileExt::read_exact_at(file, buf, offset);
    #[cfg(windows)]
    let res = {
        let mut done = 0;
        let mut res = Ok(());
        while done < buf.len() {
            match std::os::windows::fs::FileExt::seek_read(
                file,
                &mut buf[done..],
                offset + done as u64,
            ) {
                Ok(0) => {
                    res = Err(std::io::ErrorKind::UnexpectedEof.into());
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        res
    };
    match res {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}
