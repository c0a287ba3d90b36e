//! HTML pieces every HTML renderer shares (the report, its chart, the
//! allocator and stack views, the diff): escaping and the categories'
//! colours. A leaf of `report`, so that the renderers need not import one
//! another for them.

use crate::model::Category;

/// Stable colour per category (legend, areas and table swatches).
pub fn colour(c: Category) -> &'static str {
    match c {
        Category::Parameter => "#4e79a7",
        Category::Gradient => "#f28e2b",
        Category::OptimizerState => "#e15759",
        Category::Activation => "#76b7b2",
        Category::AutogradDetail => "#59a14f",
        Category::Temporary => "#edc948",
        Category::Input => "#b07aa1",
        Category::KvCache => "#ff9da7",
        Category::AllocatorCache => "#9c755f",
        Category::Unknown => "#bab0ac",
    }
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape("<script>alert(\"x&y\")</script>'"),
            "&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt;&#39;"
        );
    }
}
