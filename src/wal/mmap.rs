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
        // SAFETY: the mapping is read-only and lives only while one segment is scanned. Mapped
        // memory is undefined behaviour only if the file shrinks underneath it (SIGBUS) or
        // changes where we read. Files only ever grow by appends past what we read, with one
        // exception: truncation, which happens in the server at start-up before anything else
        // maps the file, and in `tidepool-log repair`, which refuses to run while a server
        // holds the data directory's lock.
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
