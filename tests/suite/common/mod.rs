//! Helpers shared by the integration tests: the unit tests' own
//! (`src/test_support.rs`), compiled in here too rather than written twice.

#[path = "../../../src/test_support.rs"]
#[allow(dead_code)] // each test crate uses some of them
mod test_support;

#[allow(unused_imports)] // each test crate uses some of them
pub use test_support::{corpus_dir as corpus, read_maybe_gz};

/// Every file directly in `dir`, by name, with its bytes.
#[allow(dead_code)] // used by some test crates only
pub fn files_in(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// The headless browser the page tests drive (Chromium from the
/// distribution's packages; `.ci/run` installs it).
#[allow(dead_code)] // used by the browser tests only
pub fn chromium() -> &'static str {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium not installed (apt-get install chromium)")
}

/// Runs headless Chromium on `args` (a fresh profile, a 1200×1000 window
/// unless `args` sets one), within 120 seconds.
#[allow(dead_code)] // used by the browser tests only
pub fn browser(args: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let window = if args.iter().any(|a| a.starts_with("--window-size")) {
        None
    } else {
        Some("--window-size=1200,1000")
    };
    std::process::Command::new("timeout")
        .arg("120")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--hide-scrollbars",
        ])
        .args(window)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .expect("run chromium")
}

/// Loads `page` in Chromium and returns the JSON its probe script left in
/// `<pre id="memcut-result">`.
#[allow(dead_code)] // used by the browser tests only
pub fn probe_result(page: &std::path::Path, name: &str) -> serde_json::Value {
    let out = browser(&["--dump-dom".into(), format!("file://{}", page.display())]);
    assert!(out.status.success(), "{name}: chromium failed");
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split_once("<pre id=\"memcut-result\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .unwrap_or_else(|| panic!("{name}: no result in the DOM:\n{dom:.3000}"))
        .0
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{name}: {e}: {json}"))
}
