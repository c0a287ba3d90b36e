//! Freeing what is no longer needed off the path that waits for a result.

/// Drops `value`: on a thread of its own when `aside` (and the thread
/// starts), else here. For what takes milliseconds to free and is not
/// needed again, so that the caller goes on meanwhile (`memcut analyze`
/// writes its report and exits; the exit does not wait for the thread).
pub(crate) fn free<T: Send + 'static>(value: T, aside: bool) {
    if aside {
        let _ = std::thread::Builder::new()
            .name("memcut-free".into())
            .spawn(move || drop(value));
    }
}
