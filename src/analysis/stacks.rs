//! Whole stacks for a report: the frames of each site that a live
//! allocation came from, interned into one [`StackTable`] per device so that
//! a frame shared by a thousand stacks is written once.

use rustc_hash::FxHashMap as HashMap;

use crate::model::{Frame, SiteId, Sites};
use crate::schema::StackTable;

/// Builds a [`StackTable`] from the sites asked for, in the order asked.
#[derive(Default)]
pub struct StackTableBuilder {
    table: StackTable,
    by_site: HashMap<SiteId, Option<u32>>,
    by_frame: HashMap<Frame, u32>,
}

impl StackTableBuilder {
    /// The stack index of `site` (interning it on first sight); `None` for
    /// a site without frames.
    pub fn stack_of(&mut self, sites: &Sites, site: SiteId) -> Option<u32> {
        if let Some(&known) = self.by_site.get(&site) {
            return known;
        }
        let frames = sites.frames(site);
        let stack = (!frames.is_empty()).then(|| {
            let ids = frames.iter().map(|f| self.frame_id(sites, *f)).collect();
            self.table.stacks.push(ids);
            (self.table.stacks.len() - 1) as u32
        });
        self.by_site.insert(site, stack);
        stack
    }

    fn frame_id(&mut self, sites: &Sites, frame: Frame) -> u32 {
        if let Some(&id) = self.by_frame.get(&frame) {
            return id;
        }
        let id = self.table.frames.len() as u32;
        let (file, name) = (sites.str(frame.filename), sites.str(frame.name));
        self.table.frames.push(frame_text(file, frame.line, name));
        if super::site_names::is_noise(file, name) {
            self.table.internal.push(id);
        }
        self.by_frame.insert(frame, id);
        id
    }

    pub fn finish(self) -> StackTable {
        self.table
    }
}

/// `file:line function` with the whole path; the name alone for frames
/// without a real file (Chrome traces' operators, the profiler's `none`,
/// C++ frames of unknown file `??`).
fn frame_text(file: &str, line: u32, name: &str) -> String {
    let name = super::site_names::clean_name(name);
    let no_file =
        file.is_empty() || file == "none" || file == "??" || super::site_names::is_category(file);
    match (no_file, line) {
        (true, _) => name,
        (false, 0) => format!("{file} {name}"),
        (false, _) => format!("{file}:{line} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_stacks_are_interned_innermost_first() {
        let mut sites = Sites::default();
        let mut frame = |file: &str, line, name: &str| Frame {
            filename: sites.intern_str(file),
            line,
            name: sites.intern_str(name),
        };
        let alloc = frame("??", 0, "c10::cuda::CUDACachingAllocator::malloc");
        let linear = frame("/venv/torch/nn/modules/linear.py", 125, "forward");
        let train = frame("/home/me/train.py", 40, "step");
        let op = frame("", 0, "aten::mm");
        let a = sites.intern_site(&[alloc, linear, train]);
        let b = sites.intern_site(&[alloc, train]);
        let c = sites.intern_site(&[op]);
        let mut builder = StackTableBuilder::default();
        assert_eq!(builder.stack_of(&sites, a), Some(0));
        assert_eq!(builder.stack_of(&sites, b), Some(1));
        assert_eq!(builder.stack_of(&sites, a), Some(0));
        assert_eq!(builder.stack_of(&sites, 0), None);
        assert_eq!(builder.stack_of(&sites, c), Some(2));
        let table = builder.finish();
        assert_eq!(
            table.frames,
            [
                "c10::cuda::CUDACachingAllocator::malloc",
                "/venv/torch/nn/modules/linear.py:125 forward",
                "/home/me/train.py:40 step",
                "aten::mm"
            ]
        );
        assert_eq!(table.internal, [0]);
        assert_eq!(table.stacks, [vec![0, 1, 2], vec![0, 2], vec![3]]);
        assert_eq!(
            table.frames_of(1),
            [
                ("c10::cuda::CUDACachingAllocator::malloc", true),
                ("/home/me/train.py:40 step", false)
            ]
        );
        assert!(table.frames_of(9).is_empty());
    }
}
