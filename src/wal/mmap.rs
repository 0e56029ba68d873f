//! The one place that maps a file into memory. Kept tiny because it is `unsafe`.

use std::fs::File;
use std::io;

/// A read-only view of a whole file. Empty files are represented without a mapping, because
/// mapping zero bytes is an error on Linux.
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    pub fn open(file: &File) -> io::Result<MappedFile> {
        if file.metadata()?.len() == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the mapping is read-only and lives only while one segment is scanned. It is
        // undefined behaviour only if the file changes underneath it: shrinks (SIGBUS) or has
        // bytes rewritten (a live server writes records over the zeros it preallocated). Nothing
        // writes a segment while it is mapped: the server maps segments only at start-up,
        // before it writes, and holds the data directory's lock from then on; `tidepool-log`
        // reads a directory whose lock a server holds with `ReadMode::Copied`, never mapped.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(MappedFile { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m,
            None => &[],
        }
    }
}
