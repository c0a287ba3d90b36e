//! Agreement of memcut's categories with PyTorch's own, on real runs.
//!
//! `sample_traces/*.snapshot.pickle.gz` were made by `_profile_to_snapshot`
//! (see `sample_traces/generate.py`): every alloc entry carries PyTorch's
//! category. The classifier ignores it; here it is the ground truth. Metric:
//! bytes-weighted agreement among the bytes live at the peak whose PyTorch
//! category is known (memcut's `kv_cache` agrees with PyTorch's `activation`).

use std::path::Path;

use memcut::analysis::replay_and_classify;
use memcut::model::Category;

fn agreement(path: &Path) -> (f64, u64, Vec<(Category, Category, u64)>) {
    let trace = memcut::input::read_trace(
        std::fs::File::open(path).unwrap(),
        &memcut::input::Limits::default(),
    )
    .unwrap();
    let device = trace
        .devices
        .iter()
        .find(|d| d.device == "cpu")
        .expect("cpu device");
    let tl = replay_and_classify(&trace, device, &[]);
    let peak = tl.replay.peak_position();
    let (mut agree, mut known) = (0u64, 0u64);
    let mut confusion = std::collections::BTreeMap::new();
    for (i, c) in tl.replay.intervals.iter().zip(&tl.classes) {
        if !i.live_at(peak) {
            continue;
        }
        let Some(truth) = i.given.filter(|g| *g != Category::Unknown) else {
            continue;
        };
        known += i.size;
        let ok = c.category == truth
            || (c.category == Category::KvCache && truth == Category::Activation);
        if ok {
            agree += i.size;
        } else {
            *confusion.entry((truth, c.category)).or_insert(0u64) += i.size;
        }
    }
    let mut conf: Vec<_> = confusion.into_iter().map(|((t, m), b)| (t, m, b)).collect();
    conf.sort_by_key(|c| std::cmp::Reverse(c.2));
    (agree as f64 / known.max(1) as f64, known, conf)
}

#[test]
fn categories_agree_with_pytorch_on_sample_runs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    let mut runs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".snapshot.pickle.gz"))
        .collect();
    runs.sort();
    assert!(
        runs.len() >= 6,
        "expected the six sample runs in {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for run in &runs {
        let (share, known, confusion) = agreement(run);
        let name = run.file_name().unwrap().to_string_lossy().to_string();
        println!("{name}: {:.1}% of {known} known bytes agree; top disagreements (pytorch -> memcut): {:?}", share * 100.0, &confusion[..confusion.len().min(4)]);
        if share < 0.90 {
            failures.push(format!("{name}: {:.1}%", share * 100.0));
        }
    }
    assert!(failures.is_empty(), "below 90% agreement: {failures:?}");
}
