//! A big plain trace read through a memory map of the file (issue 35), a
//! window at a time, with the pages behind the reader dropped from the
//! map as it goes.
//!
//! Why: a big Chrome trace is read on two threads (`chrome::split`), and
//! through `read` each of them first copied its half out of the page cache
//! into its buffer: ~10% of the read's samples (`_copy_to_iter`) on
//! trace-owlv2.json, on the threads that parse. Mapped, the parser reads
//! the page cache in place. The map's pages count in the process's RSS
//! once touched, so every [`RELEASE`] bytes a reader passes are dropped from
//! the map (`MADV_DONTNEED`: on a mapping that is only read, the pages stay
//! in the page cache and a later touch maps them again, with the same
//! bytes), which keeps the map's share of the peak to a few windows per
//! reader.
//!
//! Only when asked ([`super::Limits::map_files`]: the `memcut` command asks,
//! the library and its Python binding do not by default): a file truncated
//! by another process while it is mapped makes the next touch of a page
//! past its new end raise `SIGBUS`, which ends the process, where a read
//! would have ended the input with an error.

use std::fs::File;
use std::io::{BufRead, Read};

use memmap2::Mmap;

/// What [`MappedReader::fill_buf`] gives at most: the size of the buffer
/// the read path uses, so that items cut by a window's end (stitched by
/// the stream reader) are as rare as before.
const WINDOW: usize = 1 << 20;

/// How many bytes a reader passes before it drops them from the map.
const RELEASE: usize = 8 << 20;

/// A file mapped for reading.
pub(super) struct Mapped {
    map: Mmap,
}

impl Mapped {
    /// Maps the first `len` bytes of `file` (its size when opened); `None`
    /// where the system refuses (the caller then reads it).
    pub(super) fn open(file: &File, len: u64) -> Option<Mapped> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: the map is only ever read, as bytes the parsers check like
        // any others; what another process may do to the file meanwhile is
        // the module's note (a truncation raises SIGBUS).
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(file) }.ok()?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Some(Mapped { map })
    }

    /// A reader of the map from byte `from` on.
    pub(super) fn reader(&self, from: u64) -> MappedReader<'_> {
        let pos = usize::try_from(from).map_or(self.map.len(), |f| f.min(self.map.len()));
        MappedReader {
            map: &self.map,
            pos,
            released: pos,
        }
    }
}

/// Reads a [`Mapped`] file in windows of [`WINDOW`] bytes, dropping what
/// it passed from the map every [`RELEASE`] bytes.
pub(super) struct MappedReader<'a> {
    map: &'a Mmap,
    /// The next byte to give.
    pos: usize,
    /// Where the bytes not yet dropped from the map start.
    released: usize,
}

impl MappedReader<'_> {
    /// Drops the pages of the bytes passed since the last release from the
    /// map (a page the reader is still in is only mapped again on its next
    /// touch).
    fn release(&mut self) {
        #[cfg(unix)]
        // SAFETY: `MADV_DONTNEED` on a mapping nothing writes only unmaps
        // its pages: a later read maps the page cache's same bytes again.
        // The range lies within the map (`released <= pos <= len`).
        unsafe {
            let _ = self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                self.released,
                self.pos - self.released,
            );
        }
        self.released = self.pos;
    }
}

impl Read for MappedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        super::read_buffered(self, buf)
    }
}

impl BufRead for MappedReader<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let end = self.pos.saturating_add(WINDOW).min(self.map.len());
        Ok(&self.map[self.pos..end])
    }

    fn consume(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.map.len());
        if self.pos - self.released >= RELEASE {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows, consumes of every size and the releases behind them give
    /// the file's bytes, from any start, and nothing past its end.
    #[test]
    fn a_mapped_reader_gives_the_files_bytes() {
        let bytes: Vec<u8> = (0..(RELEASE * 2 + WINDOW + 12_345))
            .map(|i| (i * 7 + i / 4099) as u8)
            .collect();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &bytes).unwrap();
        let handle = File::open(file.path()).unwrap();
        let mapped = Mapped::open(&handle, bytes.len() as u64).unwrap();
        for from in [0, 1, 4095, RELEASE - 3, bytes.len() - 10, bytes.len()] {
            let mut reader = mapped.reader(from as u64);
            let mut got = Vec::new();
            let mut step = 1usize;
            loop {
                let window = reader.fill_buf().unwrap();
                assert!(window.len() <= WINDOW);
                if window.is_empty() {
                    break;
                }
                // Steps of many sizes, some past a window's end.
                let n = step.min(window.len());
                got.extend_from_slice(&window[..n]);
                reader.consume(n);
                step = (step * 31 + 17) % (WINDOW + WINDOW / 3) + 1;
            }
            assert!(got == bytes[from..], "from {from}");
            let mut rest = Vec::new();
            reader.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
        }
        let mut whole = Vec::new();
        mapped.reader(0).read_to_end(&mut whole).unwrap();
        assert!(whole == bytes);
        assert!(mapped.reader(u64::MAX).fill_buf().unwrap().is_empty());
    }

    #[test]
    fn an_empty_file_is_not_mapped() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let handle = File::open(file.path()).unwrap();
        assert!(Mapped::open(&handle, 0).is_none());
    }
}
