//! The one place that maps a file into memory. Kept tiny because it is the only `unsafe`.

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
        // SAFETY: the mapping is read-only and lives only while a segment is scanned. tidepool never
        // writes to a segment another process could be reading: the server holds an exclusive
        // lock on the data directory, and the inspection tool refuses to run against a
        // directory a live server has locked (it maps only files nobody appends to). A file
        // truncated underneath the map would raise SIGBUS; the lock is what rules that out.
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
