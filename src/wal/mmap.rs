//! The one place that maps a file into memory (`sys::map_file`, whose contract this keeps).

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
        // The mapping lives only while one segment is scanned, and nothing writes a segment
        // while it is mapped: the server maps segments only at start-up, before it writes, and
        // holds the data directory's lock from then on; `tidepool-log` reads a directory whose
        // lock a server holds with `ReadMode::Copied`, never mapped.
        let map = crate::sys::map_file(file)?;
        Ok(MappedFile { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m,
            None => &[],
        }
    }
}
