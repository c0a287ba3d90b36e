"""Type stubs of the extension module built from python/src/lib.rs.

Values cross as JSON text made by the Rust library's own serialisation; the
public API in ``memcut/__init__.py`` turns them into dicts.
"""

from typing import List, Optional, Tuple

__version__: str
SUMMARY_COLUMNS: List[str]

class MemcutError(ValueError):
    """memcut could not do what was asked: the message is the CLI's one-line error."""

class Options:
    """Checked options of ``memcut analyze``/``batch`` (picklable; files are read at construction)."""

    def __init__(
        self,
        budget: Optional[str] = None,
        headroom: str = "10%",
        levers: Optional[str] = None,
        levers_file: Optional[str] = None,
        rules: Optional[str] = None,
        rules_file: Optional[str] = None,
        device: Optional[str] = None,
        top: int = 10,
        dp_ranks: int = 1,
        order: str = "cheapest",
        what_if: List[str] = ...,
        at: Optional[str] = None,
        device_memory: Optional[str] = None,
    ) -> None: ...

def analyze_file(path: str, options: Options) -> str: ...
def analyze_bytes(data: bytes, name: str, options: Options) -> str: ...
def render(report_json: str, format: str) -> str: ...
def diff(
    before_kind: str,
    before: bytes,
    after_kind: str,
    after: bytes,
    options: Options,
    device: Optional[str] = None,
    top: int = 20,
    fail_if_peak_grows: Optional[float] = None,
) -> str: ...
def render_diff(diff_json: str, format: str) -> str: ...
def summarize_peak_sources(components_json: str) -> str: ...
def plan_memory_cuts(components_json: str, target_gb: float) -> str: ...
def recommend(summary_json: str, plan_json: str) -> str: ...
def summary_rows(data: bytes, name: str, options: Options) -> str: ...
def sort_rows(rows_json: str) -> str: ...
def render_summary(rows_json: str, path: str) -> str: ...
