pub fn parse_chrome_trace(_bytes: &[u8]) -> crate::Result<crate::model::Trace> {
    Err(crate::Error::NoMemoryEvents)
}
