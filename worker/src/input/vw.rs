//! Vowpal Wabbit text: `label ['tag]|namespace[:scale] feature[:value] ... |namespace ...`.
//! Each namespace is a variable; a namespace with several features per example is
//! set-valued, and `prepare` splits its block.

use super::{ExampleReader, Lines, RawExample};
use crate::error::Result;
use std::collections::HashMap;

pub struct VwReader {
    lines: Lines,
    namespaces: Vec<String>,
    index: HashMap<String, u32>,
}

impl VwReader {
    pub fn new(lines: Lines) -> Self {
        Self { lines, namespaces: Vec::new(), index: HashMap::new() }
    }

    fn namespace(&mut self, name: &str) -> u32 {
        if let Some(&v) = self.index.get(name) {
            return v;
        }
        let v = self.namespaces.len() as u32;
        self.namespaces.push(name.to_string());
        self.index.insert(name.to_string(), v);
        v
    }
}

impl ExampleReader for VwReader {
    fn read(&mut self, example: &mut RawExample) -> Result<bool> {
        if !self.lines.next_line()? {
            return Ok(false);
        }
        example.clear();
        let text = std::mem::take(&mut self.lines.text);
        let result = self.parse(&text, example);
        self.lines.text = text;
        result.map(|_| true)
    }

    fn variable_name(&self, v: u32) -> &str {
        &self.namespaces[v as usize]
    }

    fn is_dense(&self, _: u32) -> bool {
        false
    }

    fn variable_count(&self) -> u32 {
        self.namespaces.len() as u32
    }
}

impl VwReader {
    fn parse(&mut self, text: &str, example: &mut RawExample) -> Result<()> {
        let mut segments = text.split('|');
        let header = segments.next().unwrap_or_default();
        let mut head = header.split_ascii_whitespace().filter(|t| !t.starts_with('\''));
        // VW allows unlabelled examples (`|ns f ...`), which `predict` scores; their label is
        // NaN, and `prepare` and `eval`, which need labels, refuse them.
        example.label = match head.next() {
            Some(label) => self.lines.label(label)?,
            None => f64::NAN,
        };
        example.line = self.lines.line;
        if let Some(weight) = head.next() {
            let w = self.lines.number(weight, "importance weight")?;
            if w != 1.0 {
                return Err(self
                    .lines
                    .error(format!("importance weight {w} is not supported; linea trains unweighted examples")));
            }
        }
        for segment in segments {
            // A namespace name starts right after '|'; a space there means the default one.
            let (name, rest) = match segment.chars().next() {
                Some(c) if !c.is_whitespace() => segment.split_once(char::is_whitespace).unwrap_or((segment, "")),
                _ => (" ", segment),
            };
            let (name, scale) = match name.split_once(':') {
                Some((n, s)) => (n, self.lines.number(s, format_args!("scale of namespace {n}"))?),
                None => (name, 1.0),
            };
            let variable = self.namespace(name);
            for token in rest.split_ascii_whitespace() {
                let (key, value) = match token.rsplit_once(':') {
                    Some((k, v)) => (k, self.lines.number(v, format_args!("value of feature {k}"))?),
                    None => (token, 1.0),
                };
                let value = value * scale;
                if value != 0.0 {
                    example.push(variable, key, value);
                }
            }
        }
        Ok(())
    }
}
