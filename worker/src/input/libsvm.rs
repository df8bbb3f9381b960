//! LIBSVM / SVMlight: `label index:value index:value ... [# comment]`.

use super::{ExampleReader, Lines, RawExample};
use crate::error::Result;

pub struct LibsvmReader {
    lines: Lines,
}

impl LibsvmReader {
    pub fn new(lines: Lines) -> Self {
        Self { lines }
    }
}

impl ExampleReader for LibsvmReader {
    fn read(&mut self, example: &mut RawExample) -> Result<bool> {
        if !self.lines.next_line()? {
            return Ok(false);
        }
        example.clear();
        let lines = &self.lines;
        let body = lines.text.split('#').next().unwrap_or_default();
        let mut tokens = body.split_ascii_whitespace();
        let Some(label) = tokens.next() else { return Err(lines.error("missing label")) };
        example.label = lines.label(label)?;
        example.line = lines.line;
        for token in tokens {
            let Some((index, value)) = token.split_once(':') else {
                return Err(lines.error(format!("feature {token:?} is not index:value")));
            };
            let index: u64 = index
                .parse()
                .map_err(|_| lines.error(format!("feature index {index:?} is not a non-negative integer")))?;
            let value = lines.number(value, format_args!("value of feature {index}"))?;
            if value != 0.0 {
                example.push(0, itoa::Buffer::new().format(index), value);
            }
        }
        Ok(true)
    }

    fn variable_name(&self, _: u32) -> &str {
        "f"
    }

    fn is_dense(&self, _: u32) -> bool {
        false
    }

    fn variable_count(&self) -> u32 {
        1
    }
}
