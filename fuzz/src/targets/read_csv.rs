//! The csv reader on arbitrary bytes (see crate::read for what is checked).
pub fn run(data: &[u8]) {
    crate::read(linea_worker::input::Format::Csv, data)
}
