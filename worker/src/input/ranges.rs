//! A text input cut into byte ranges that end at line boundaries, so that each range can be
//! parsed on its own thread (`linea prepare --threads`).
//!
//! A libsvm or VW example is one line, so any line boundary is an example boundary. A
//! delimited (Criteo, CSV) record is one line too unless a quoted field holds a line break,
//! and the csv reader also ends lines at a lone `\r` and drops a byte-order mark at the
//! start of its input. A range of such a file is cut off only while none of that can
//! matter: from the first range holding a `"`, a lone `\r`, or starting with a byte-order
//! mark, the rest of the file is one [`Range::Rest`], read by one reader in order.

use super::delimited::{DelimitedReader, Layout};
use super::libsvm::LibsvmReader;
use super::vw::VwReader;
use super::{ExampleReader, FeatureSpec, Format, Lines};
use crate::error::{LineaError, Result};
use std::io::Read;
use std::sync::Arc;

/// Bytes per range: large enough that the per-range work (a reader, a local dictionary per
/// variable) is small against the parsing, small enough that a few ranges per thread in
/// flight stay a few tens of MB.
pub const RANGE_BYTES: usize = 8 << 20;

/// A part of the input, in file order.
pub enum Range {
    /// Whole lines (the last range may lack the final line break).
    Text {
        bytes: Vec<u8>,
        /// The range starts the file (where a CSV header is).
        first: bool,
        /// Line breaks in `bytes`: how far the next range's line numbers start from this one's.
        line_breaks: u64,
    },
    /// Everything from here on, to be read in order by one reader: `head` (whole lines and
    /// the start of the next), then [`Ranges::remainder`]. Nothing is read twice, so a
    /// pipe works too.
    Rest { head: Vec<u8>, first: bool },
}

/// Cuts a file into [`Range`]s.
pub struct Ranges {
    path: String,
    file: std::fs::File,
    /// Bytes read past the end of the last range (a line begun).
    carry: Vec<u8>,
    /// File offset of the next range's first byte.
    offset: u64,
    at_end: bool,
    /// Delimited text: ranges are checked for what would make a line boundary not a record's.
    delimited: bool,
    bytes_per_range: usize,
}

impl Ranges {
    pub fn open(path: &str, format: Format, bytes_per_range: usize) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(LineaError::io(path))?;
        Ok(Self {
            path: path.to_string(),
            file,
            carry: Vec::new(),
            offset: 0,
            at_end: false,
            delimited: matches!(format, Format::Criteo | Format::Csv),
            bytes_per_range: bytes_per_range.max(1),
        })
    }

    /// The input's first line (without reading it twice: it stays for the first range), or
    /// nothing for an empty input. Only before the first range.
    pub fn first_line(&mut self) -> Result<&[u8]> {
        debug_assert_eq!(self.offset, 0, "first_line after a range was handed out");
        let mut searched = 0;
        while !self.carry[searched..].contains(&b'\n') {
            searched = self.carry.len();
            let read =
                (&mut self.file).take(64 << 10).read_to_end(&mut self.carry).map_err(LineaError::io(&self.path))?;
            if read == 0 {
                break;
            }
        }
        let end = self.carry.iter().position(|&b| b == b'\n').map_or(self.carry.len(), |p| p + 1);
        Ok(&self.carry[..end])
    }

    /// The file past everything handed out so far (after a [`Range::Rest`]: past its head).
    pub fn remainder(&self) -> Result<std::fs::File> {
        self.file.try_clone().map_err(LineaError::io(&self.path))
    }

    /// The next range, or `None` after the last.
    pub fn next_range(&mut self) -> Result<Option<Range>> {
        if self.at_end {
            return Ok(None);
        }
        let mut bytes = std::mem::take(&mut self.carry);
        let mut end = None;
        let mut searched = 0;
        while end.is_none() {
            let read = (&mut self.file)
                .take(self.bytes_per_range as u64)
                .read_to_end(&mut bytes)
                .map_err(LineaError::io(&self.path))?;
            if read == 0 {
                self.at_end = true;
                break;
            }
            // The last line break of what was read ends the range; a line longer than a
            // range makes it longer.
            end = bytes[searched..].iter().rposition(|&b| b == b'\n').map(|p| searched + p + 1);
            searched = bytes.len();
        }
        if let Some(end) = end {
            self.carry = bytes.split_off(end);
        }
        if bytes.is_empty() {
            return Ok(None);
        }
        let first = self.offset == 0;
        let scan = Scan::of(&bytes);
        if self.delimited && !plain_records(&bytes, &scan, first) {
            self.at_end = true;
            let mut head = bytes;
            head.append(&mut self.carry);
            return Ok(Some(Range::Rest { head, first }));
        }
        self.offset += bytes.len() as u64;
        Ok(Some(Range::Text { bytes, first, line_breaks: scan.line_breaks }))
    }
}

/// What one pass over a range finds: its line breaks, and whether it holds a quote or a
/// carriage return. Counted in blocks of 255 bytes with byte counters, which the compiler
/// turns into vector code (a plain `filter().count()` took 4 instructions per byte).
#[derive(Debug, PartialEq)]
struct Scan {
    line_breaks: u64,
    quotes: bool,
    returns: bool,
}

impl Scan {
    fn of(bytes: &[u8]) -> Scan {
        let (mut line_breaks, mut quotes, mut returns) = (0u64, 0u8, 0u8);
        for block in bytes.chunks(255) {
            let (mut n, mut q, mut r) = (0u8, 0u8, 0u8);
            for &b in block {
                n += (b == b'\n') as u8;
                q |= (b == b'"') as u8;
                r |= (b == b'\r') as u8;
            }
            line_breaks += n as u64;
            quotes |= q;
            returns |= r;
        }
        Scan { line_breaks, quotes: quotes != 0, returns: returns != 0 }
    }
}

/// Whether every line of `bytes` is one delimited record, read the same alone as in the file.
fn plain_records(bytes: &[u8], scan: &Scan, first: bool) -> bool {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    if scan.quotes || (!first && bytes.starts_with(BOM)) {
        return false;
    }
    !scan.returns || bytes.iter().enumerate().all(|(i, &b)| b != b'\r' || bytes.get(i + 1) == Some(&b'\n'))
}

/// Makes readers of ranges of one file: what is decided once per file (a CSV's delimiter,
/// header and column types) is decided here.
pub enum RangeParser {
    Libsvm { file: String },
    Vw { file: String },
    Delimited(Arc<Layout>),
}

impl RangeParser {
    /// The parser of `ranges`, before their first range; `None` for a format that is not
    /// read by lines (Parquet).
    pub fn new(path: &str, spec: &FeatureSpec, ranges: &mut Ranges) -> Result<Option<Self>> {
        Ok(Some(match spec.format {
            Format::Libsvm => RangeParser::Libsvm { file: path.to_string() },
            Format::Vw => RangeParser::Vw { file: path.to_string() },
            Format::Criteo => RangeParser::Delimited(Layout::criteo(path, ranges.first_line()?, spec)?.into()),
            Format::Csv => RangeParser::Delimited(Layout::csv(path, spec)?.into()),
            Format::Parquet => return Ok(None),
        }))
    }

    /// A reader of the range `bytes`; its line numbers count from 1 at the range's start.
    pub fn reader(&self, bytes: Vec<u8>, first: bool) -> Box<dyn ExampleReader> {
        self.over(Box::new(std::io::Cursor::new(bytes)), first)
    }

    /// A reader of the rest of the file: `head` (from a line start), then `remainder`; lines
    /// counted from 1 at the head's start.
    pub fn rest(&self, head: Vec<u8>, remainder: std::fs::File, first: bool) -> Box<dyn ExampleReader> {
        let source = std::io::Cursor::new(head).chain(remainder);
        self.over(Box::new(std::io::BufReader::with_capacity(1 << 20, source)), first)
    }

    fn over(&self, source: Box<dyn std::io::BufRead + Send>, first: bool) -> Box<dyn ExampleReader> {
        match self {
            RangeParser::Libsvm { file } => Box::new(LibsvmReader::new(Lines::over(file, source))),
            RangeParser::Vw { file } => Box::new(VwReader::new(Lines::over(file, source))),
            RangeParser::Delimited(layout) => Box::new(DelimitedReader::new(layout.clone(), source, first)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (bytes, first, whether the rest of the file starts there).
    fn cut(text: &[u8], format: Format, bytes_per_range: usize) -> Vec<(Vec<u8>, bool, bool)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input");
        std::fs::write(&path, text).unwrap();
        let mut ranges = Ranges::open(path.to_str().unwrap(), format, bytes_per_range).unwrap();
        let mut out = Vec::new();
        while let Some(range) = ranges.next_range().unwrap() {
            match range {
                Range::Text { bytes, first, line_breaks } => {
                    assert_eq!(line_breaks, bytes.iter().filter(|&&b| b == b'\n').count() as u64);
                    out.push((bytes, first, false))
                }
                Range::Rest { mut head, first } => {
                    ranges.remainder().unwrap().read_to_end(&mut head).unwrap();
                    out.push((head, first, true))
                }
            }
        }
        out
    }

    #[test]
    fn ranges_end_at_line_breaks_and_cover_the_file() {
        let text = b"1 1:1\n0 2:1 3:1\n\n1 4:2\n0 5:1";
        for size in 1..text.len() + 2 {
            let ranges = cut(text, Format::Libsvm, size);
            let joined: Vec<u8> = ranges.iter().flat_map(|r| r.0.clone()).collect();
            assert_eq!(joined, text.to_vec(), "range size {size}");
            for (i, (bytes, first, rest)) in ranges.iter().enumerate() {
                assert_eq!(*first, i == 0);
                assert!(!rest);
                if i + 1 < ranges.len() {
                    assert_eq!(bytes.last(), Some(&b'\n'), "range size {size}: range {i} ends mid-line");
                }
            }
        }
    }

    #[test]
    fn a_quote_hands_the_rest_of_a_delimited_file_to_one_reader() {
        let text = b"a,b\n1,2\n3,\"x\ny\"\n5,6\n";
        let ranges = cut(text, Format::Csv, 4);
        let last = ranges.last().unwrap();
        // "a,b\n" and "1,2\n" are plain; the range holding the quote starts the rest, which
        // is the file's last 14 bytes, each read once.
        assert_eq!(ranges.len(), 3);
        assert!(last.2 && !last.1);
        assert_eq!(last.0, text[8..].to_vec());
        // libsvm has no quoting: the same bytes are cut at every line.
        assert!(cut(text, Format::Libsvm, 4).iter().all(|r| !r.2));
    }

    #[test]
    fn a_lone_carriage_return_or_an_inner_byte_order_mark_is_not_plain() {
        let plain = |bytes: &[u8], first| plain_records(bytes, &Scan::of(bytes), first);
        assert!(plain(b"1,2\r\n3,4\r\n", false));
        assert!(!plain(b"1,2\r3,4\n", false));
        assert!(!plain(b"1,2\r", false));
        assert!(plain(b"\xEF\xBB\xBF1,2\n", true));
        assert!(!plain(b"\xEF\xBB\xBF1,2\n", false));
    }

    #[test]
    fn the_scan_counts_across_blocks() {
        let mut bytes = vec![b'a'; 1000];
        for i in (0..1000).step_by(7) {
            bytes[i] = b'\n';
        }
        assert_eq!(Scan::of(&bytes), Scan { line_breaks: 143, quotes: false, returns: false });
        bytes[999] = b'"';
        bytes[500] = b'\r';
        assert_eq!(Scan::of(&bytes), Scan { line_breaks: 143, quotes: true, returns: true });
    }
}
