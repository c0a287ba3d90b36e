use memcut::analysis::{describe_site, replay_and_classify};
use memcut::model::Category;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let trace = memcut::input::read_trace(std::fs::File::open(&path).unwrap(), &Default::default())
        .unwrap();
    let device = trace.devices.iter().find(|d| d.device == "cpu").unwrap();
    let tl = replay_and_classify(&trace, device, &[]);
    let peak = tl.replay.peak_position();
    for (i, c) in tl.replay.intervals.iter().zip(&tl.classes) {
        if !i.live_at(peak) {
            continue;
        }
        let Some(t) = i.given else { continue };
        if t == c.category || t == Category::Unknown {
            continue;
        }
        println!(
            "{} {}..{} {:?} truth={} memcut={} rule={} site={}",
            i.size,
            i.start,
            i.end,
            i.origin,
            t,
            c.category,
            c.rule,
            describe_site(&trace.sites, i.site)
        );
    }
}
