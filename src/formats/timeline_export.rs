pub fn parse_memory_timeline(_bytes: &[u8]) -> crate::Result<crate::model::Trace> {
    Err(crate::Error::NoMemoryEvents)
}
pub fn looks_like_memory_timeline(_bytes: &[u8]) -> bool {
    false
}
