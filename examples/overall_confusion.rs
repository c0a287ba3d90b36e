//! Where memcut and PyTorch disagree over every allocation of a profile-derived snapshot.
use memcut::analysis::{describe_site, replay_and_classify};
use std::collections::BTreeMap;
fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let trace = memcut::input::read_trace(std::fs::File::open(&path).unwrap(), &Default::default())
        .unwrap();
    let device = &trace.devices[0];
    let tl = replay_and_classify(&trace, device, &[]);
    let mut by: BTreeMap<(String, String, &str, String), u64> = BTreeMap::new();
    for (i, c) in tl.replay.intervals.iter().zip(&tl.classes) {
        let Some(t) = i.given else { continue };
        if t == c.category || t == memcut::model::Category::Unknown {
            continue;
        }
        *by.entry((
            t.to_string(),
            c.category.to_string(),
            c.rule,
            describe_site(&trace.sites, i.site),
        ))
        .or_default() += i.size;
    }
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    for (k, v) in rows.iter().take(8) {
        println!("{v} {k:?}");
    }
}
