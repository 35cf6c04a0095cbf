//! Trace readers: the accesses of a cache-replacement trace, one entity id
//! at a time, in the text form the sharding emulation hashes.
//!
//! Formats (those of Akka's passivation simulator):
//! - `lirs`: text, one decimal id per line. A blank line is the id "" (Akka
//!   keeps it; gli has one), a line `*` is skipped (Caffeine's marker), and a
//!   trailing `\r` is dropped so CRLF files (loop) read as LF ones.
//! - `simple`: text, one id per line, any text without control characters.
//! - `arc`: text, `start count ...` per line, the ids `start..start+count-1`.
//! - `lirs2`: binary, one big-endian `u32` per access.
//! - `corda`: binary, one big-endian `i64` per access.
//!
//! And those of the broader corpus Caffeine's simulator reads:
//! - `address`: text, `TYPE 0xADDRESS SIZE` per line (SPEC CPU memory
//!   traces); the id is the address, in decimal.
//! - `adapt-size`: text, `TIMESTAMP ID SIZE` per line (a CDN's requests);
//!   the id is the pair, `ID:SIZE`, since one ID names objects of several
//!   sizes.
//! - `cache2k`: binary, one big-endian `i32` per access.
//! - `scarab`: binary, one big-endian `i64` per access.
//!
//! gzip and xz input is decompressed transparently, recognised by its magic
//! bytes whatever the file is called. gzip is streamed; xz is decompressed
//! into memory first (`lzma-rs` has no streaming xz reader).

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The longest text line accepted; longer ones are taken for binary data.
const MAX_LINE: usize = 4096;

/// A trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Text, one decimal id per line (the LIRS paper's traces).
    Lirs,
    /// Binary big-endian `u32` ids (the LIRS2 paper's traces).
    Lirs2,
    /// Binary big-endian `i64` ids (R3 Corda's traces).
    Corda,
    /// Text, `start count` ranges per line (the ARC paper's traces).
    Arc,
    /// Text, one id per line.
    Simple,
    /// Text, `TYPE 0xADDRESS SIZE` per line (SPEC CPU memory traces).
    Address,
    /// Text, `TIMESTAMP ID SIZE` per line (AdaptSize's CDN trace).
    AdaptSize,
    /// Binary big-endian `i32` ids (cache2k's traces).
    Cache2k,
    /// Binary big-endian `i64` ids (Scarab Research's trace).
    Scarab,
}

impl TraceFormat {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [TraceFormat; 9] = [
        TraceFormat::Lirs,
        TraceFormat::Lirs2,
        TraceFormat::Corda,
        TraceFormat::Arc,
        TraceFormat::Simple,
        TraceFormat::Address,
        TraceFormat::AdaptSize,
        TraceFormat::Cache2k,
        TraceFormat::Scarab,
    ];

    /// The format's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Lirs => "lirs",
            TraceFormat::Lirs2 => "lirs2",
            TraceFormat::Corda => "corda",
            TraceFormat::Arc => "arc",
            TraceFormat::Simple => "simple",
            TraceFormat::Address => "address",
            TraceFormat::AdaptSize => "adapt-size",
            TraceFormat::Cache2k => "cache2k",
            TraceFormat::Scarab => "scarab",
        }
    }

    /// The format a file's path implies. After dropping a `.gz` or `.xz`
    /// suffix, `.lirs` is lirs, `.lirs2` lirs2, `.corda` corda, `.arc` arc
    /// and `.txt` simple. Otherwise a folder named after a format (as the
    /// published corpora are laid out: `address/gcc.trace.gz`,
    /// `adapt_size/request.trace.xz`) names it, and a `.trace` file
    /// elsewhere is lirs. `None` for anything else: the caller then has to
    /// say.
    pub fn infer(path: &Path) -> Option<TraceFormat> {
        let name = path.file_name()?.to_str()?;
        let name = strip_compression(name);
        let ext = Path::new(name)
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let by_ext = match ext.as_deref() {
            Some("lirs") => Some(TraceFormat::Lirs),
            Some("lirs2") => Some(TraceFormat::Lirs2),
            Some("corda") => Some(TraceFormat::Corda),
            Some("arc") => Some(TraceFormat::Arc),
            Some("txt") => Some(TraceFormat::Simple),
            _ => None,
        };
        let by_folder = || {
            let folder = path.parent()?.file_name()?.to_str()?.replace('_', "-");
            folder.parse().ok()
        };
        by_ext
            .or_else(by_folder)
            .or_else(|| (ext.as_deref() == Some("trace")).then_some(TraceFormat::Lirs))
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is not one of [`TraceFormat::ALL`].
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "unknown trace format '{0}' (known: lirs, lirs2, corda, arc, simple, address, adapt-size, cache2k, scarab)"
)]
pub struct UnknownFormat(pub String);

impl FromStr for TraceFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

/// The name a trace goes by in reports: the file name without directories,
/// a `.gz`/`.xz` suffix, and then a `.trace` suffix (`multi3.trace.gz` is
/// `multi3`).
pub fn trace_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let name = strip_compression(&name);
    name.strip_suffix(".trace").unwrap_or(name).to_owned()
}

fn strip_compression(name: &str) -> &str {
    name.strip_suffix(".gz")
        .or_else(|| name.strip_suffix(".xz"))
        .unwrap_or(name)
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened, read or decompressed.
    #[error("cannot read trace {}: {source}", path.display())]
    Io {
        /// The trace file.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A text line is not what the format expects.
    #[error("trace {} is not valid {format}: line {line}: {problem}", path.display())]
    Line {
        /// The trace file.
        path: PathBuf,
        /// The format it was read as.
        format: TraceFormat,
        /// 1-based line number (of the decompressed text).
        line: u64,
        /// What is wrong with it.
        problem: String,
    },
    /// A binary record is incomplete.
    #[error("trace {} is not valid {format}: byte offset {offset}: {problem}", path.display())]
    Record {
        /// The trace file.
        path: PathBuf,
        /// The format it was read as.
        format: TraceFormat,
        /// Offset of the record in the (decompressed) data.
        offset: u64,
        /// What is wrong with it.
        problem: String,
    },
}

/// Reads a trace's entity ids one by one.
pub struct TraceReader {
    path: PathBuf,
    format: TraceFormat,
    input: Box<dyn BufRead>,
    /// Text lines read so far.
    line: u64,
    /// Binary bytes read so far.
    offset: u64,
    buf: Vec<u8>,
    /// The rest of the current arc range: next id and ids left.
    arc_range: (i64, u64),
    /// "gzip" when read errors come from decompressing.
    compression: Option<&'static str>,
    /// The size of the last id read, in a format that gives one.
    size: Option<u64>,
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("path", &self.path)
            .field("format", &self.format)
            .field("line", &self.line)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// Opens `path` as `format`, decompressing gzip or xz input.
    ///
    /// # Errors
    /// [`TraceError::Io`] if the file cannot be opened or its xz data is
    /// corrupt.
    pub fn open(path: &Path, format: TraceFormat) -> Result<Self, TraceError> {
        let io_error = |source| TraceError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_error)?;
        let mut raw = BufReader::with_capacity(64 * 1024, file);
        let magic = raw.fill_buf().map_err(io_error)?;
        let mut compression = None;
        let input: Box<dyn BufRead> = if magic.starts_with(&[0x1f, 0x8b]) {
            compression = Some("gzip");
            Box::new(BufReader::with_capacity(
                64 * 1024,
                flate2::bufread::MultiGzDecoder::new(raw),
            ))
        } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            let mut data = Vec::new();
            lzma_rs::xz_decompress(&mut raw, &mut data).map_err(|e| {
                io_error(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("corrupt xz data: {e}"),
                ))
            })?;
            Box::new(Cursor::new(data))
        } else {
            Box::new(raw)
        };
        Ok(Self {
            path: path.to_owned(),
            format,
            input,
            line: 0,
            offset: 0,
            buf: Vec::with_capacity(64),
            arc_range: (0, 0),
            compression,
            size: None,
        })
    }

    /// The size in bytes of the object the last id read names, where the
    /// format gives one (adapt-size): what a weighed simulation weighs it.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    /// Reads the next entity id into `id` (cleared first); `false` at the
    /// end of the trace.
    ///
    /// # Errors
    /// [`TraceError::Io`] on a read or decompression failure, and
    /// [`TraceError::Line`] or [`TraceError::Record`] where the data does
    /// not fit the format.
    pub fn next_id(&mut self, id: &mut String) -> Result<bool, TraceError> {
        id.clear();
        match self.format {
            TraceFormat::Lirs => self.next_lirs(id),
            TraceFormat::Simple => self.next_simple(id),
            TraceFormat::Arc => self.next_arc(id),
            TraceFormat::Lirs2 => {
                let Some(bytes) = self.next_record::<4>()? else {
                    return Ok(false);
                };
                push_decimal(id, u32::from_be_bytes(bytes));
                Ok(true)
            }
            TraceFormat::Corda | TraceFormat::Scarab => {
                let Some(bytes) = self.next_record::<8>()? else {
                    return Ok(false);
                };
                push_decimal(id, i64::from_be_bytes(bytes));
                Ok(true)
            }
            TraceFormat::Cache2k => {
                let Some(bytes) = self.next_record::<4>()? else {
                    return Ok(false);
                };
                push_decimal(id, i32::from_be_bytes(bytes));
                Ok(true)
            }
            TraceFormat::Address => self.next_address(id),
            TraceFormat::AdaptSize => self.next_adapt_size(id),
        }
    }

    /// `TYPE 0xADDRESS SIZE`: the address alone names the entity (Caffeine
    /// reads these traces the same way). Blank lines carry nothing.
    fn next_address(&mut self, id: &mut String) -> Result<bool, TraceError> {
        loop {
            if !self.next_line()? {
                return Ok(false);
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let address = std::str::from_utf8(&self.buf).ok().and_then(|text| {
                let mut fields = text.split_ascii_whitespace();
                let _kind = fields.next()?;
                let address = fields.next()?;
                let hex = address
                    .strip_prefix("0x")
                    .or_else(|| address.strip_prefix("0X"))
                    .unwrap_or(address);
                u64::from_str_radix(hex, 16).ok()
            });
            let Some(address) = address else {
                return Err(self.line_error(format!(
                    "expected \"TYPE 0xADDRESS SIZE\", got \"{}\"{}",
                    snippet(&self.buf),
                    BINARY_HINT
                )));
            };
            push_decimal(id, address);
            return Ok(true);
        }
    }

    /// `TIMESTAMP ID SIZE`: the entity is the pair of ID and SIZE, as
    /// Caffeine reads the trace (the same ID comes with several sizes).
    fn next_adapt_size(&mut self, id: &mut String) -> Result<bool, TraceError> {
        loop {
            if !self.next_line()? {
                return Ok(false);
            }
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let pair = std::str::from_utf8(&self.buf).ok().and_then(|text| {
                let mut fields = text.split_ascii_whitespace();
                fields.next()?.parse::<u64>().ok()?;
                let key = fields.next()?.parse::<i64>().ok()?;
                let size = fields.next()?.parse::<i64>().ok()?;
                Some((key, size))
            });
            let Some((key, size)) = pair else {
                return Err(self.line_error(format!(
                    "expected \"TIMESTAMP ID SIZE\" (decimal numbers), got \"{}\"{}",
                    snippet(&self.buf),
                    BINARY_HINT
                )));
            };
            push_decimal(id, key);
            id.push(':');
            push_decimal(id, size);
            self.size = u64::try_from(size).ok();
            return Ok(true);
        }
    }

    fn next_lirs(&mut self, id: &mut String) -> Result<bool, TraceError> {
        loop {
            if !self.next_line()? {
                return Ok(false);
            }
            if self.buf == b"*" {
                continue;
            }
            if !self.buf.iter().all(u8::is_ascii_digit) {
                return Err(self.line_error(format!(
                    "not a decimal id: \"{}\"{}",
                    snippet(&self.buf),
                    BINARY_HINT
                )));
            }
            // All ASCII digits, so this is valid UTF-8.
            id.push_str(std::str::from_utf8(&self.buf).unwrap_or_default());
            return Ok(true);
        }
    }

    fn next_simple(&mut self, id: &mut String) -> Result<bool, TraceError> {
        if !self.next_line()? {
            return Ok(false);
        }
        match std::str::from_utf8(&self.buf) {
            Ok(text) if !text.chars().any(|c| c.is_control() && c != '\t') => {
                id.push_str(text);
                Ok(true)
            }
            _ => Err(self.line_error(format!(
                "not a text id: \"{}\"{}",
                snippet(&self.buf),
                BINARY_HINT
            ))),
        }
    }

    fn next_arc(&mut self, id: &mut String) -> Result<bool, TraceError> {
        while self.arc_range.1 == 0 {
            if !self.next_line()? {
                return Ok(false);
            }
            let parsed = std::str::from_utf8(&self.buf).ok().and_then(|text| {
                let mut fields = text.split_ascii_whitespace();
                let first = fields.next();
                let (start, count) = (first?.parse::<i64>().ok()?, fields.next()?.parse().ok()?);
                Some((start, count))
            });
            match parsed {
                Some((start, count)) => {
                    let last_ok = count == 0 || start.checked_add_unsigned(count - 1).is_some();
                    if !last_ok {
                        return Err(self.line_error(format!(
                            "the range {start} + {count} overflows a 64-bit id"
                        )));
                    }
                    self.arc_range = (start, count);
                }
                // Blank lines carry no range.
                None if self.buf.iter().all(u8::is_ascii_whitespace) => {}
                None => {
                    return Err(self.line_error(format!(
                        "expected \"start count\", got \"{}\"",
                        snippet(&self.buf)
                    )))
                }
            }
        }
        let (next, left) = self.arc_range;
        push_decimal(id, next);
        // `next` is not the last id of the range unless `left == 1`, so the
        // increment cannot overflow (checked when the range was read).
        self.arc_range = (if left > 1 { next + 1 } else { next }, left - 1);
        Ok(true)
    }

    /// Reads the next line (without `\n` or a trailing `\r`) into `buf`.
    fn next_line(&mut self) -> Result<bool, TraceError> {
        self.buf.clear();
        let mut saw_any = false;
        loop {
            let available = match self.input.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_error(e)),
            };
            if available.is_empty() {
                // The last line may lack its `\n`; an empty tail is no line.
                if !saw_any {
                    return Ok(false);
                }
                break;
            }
            saw_any = true;
            if let Some(end) = available.iter().position(|&b| b == b'\n') {
                self.buf.extend_from_slice(&available[..end]);
                self.input.consume(end + 1);
                break;
            }
            let n = available.len();
            self.buf.extend_from_slice(available);
            self.input.consume(n);
            if self.buf.len() > MAX_LINE {
                self.line += 1;
                return Err(
                    self.line_error(format!("a line longer than {MAX_LINE} bytes{BINARY_HINT}"))
                );
            }
        }
        self.line += 1;
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        if self.buf.len() > MAX_LINE {
            return Err(
                self.line_error(format!("a line longer than {MAX_LINE} bytes{BINARY_HINT}"))
            );
        }
        Ok(true)
    }

    /// Reads one `N`-byte record; `None` at a clean end of the data.
    fn next_record<const N: usize>(&mut self) -> Result<Option<[u8; N]>, TraceError> {
        let mut record = [0u8; N];
        let mut filled = 0;
        while filled < N {
            match self.input.read(&mut record[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e)),
            }
        }
        match filled {
            0 => Ok(None),
            n if n == N => {
                self.offset += N as u64;
                Ok(Some(record))
            }
            n => Err(TraceError::Record {
                path: self.path.clone(),
                format: self.format,
                offset: self.offset,
                problem: format!(
                    "truncated record: the data ends after {n} of its {N} bytes \
                     (is this a {} trace?)",
                    self.format
                ),
            }),
        }
    }

    fn line_error(&self, problem: String) -> TraceError {
        TraceError::Line {
            path: self.path.clone(),
            format: self.format,
            line: self.line,
            problem,
        }
    }

    fn io_error(&self, source: io::Error) -> TraceError {
        let source = match self.compression {
            Some(kind) => io::Error::new(
                source.kind(),
                format!("corrupt or truncated {kind} data: {source}"),
            ),
            None => source,
        };
        TraceError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

const BINARY_HINT: &str =
    " (another format? text: lirs, simple, arc, address, adapt-size; binary: lirs2, corda, cache2k, scarab)";

/// Up to 32 bytes of a bad line, printable ASCII as is, the rest escaped.
fn snippet(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(32)];
    let mut text: String = cut
        .iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if bytes.len() > cut.len() {
        text.push_str("...");
    }
    text
}

fn push_decimal(out: &mut String, value: impl fmt::Display) {
    use fmt::Write;
    // Writing to a String cannot fail.
    let _ = write!(out, "{value}");
}

#[cfg(test)]
mod tests;
