"""MkDocs hook: put the results of `make bench` on the Benchmarks page when they exist.

`make bench` writes `bench/results/` (git-ignored), ending with `report.md`: a summary
followed by every benchmark's own Markdown. That report replaces the
``<!-- bench-results -->`` marker of `docs/benchmarks/index.md`, headings one level down;
without it (a benchmark script run on its own), each `*.md` there does. Every other file
there (plots, JSON) is published next to the page, so the results' own relative links
resolve. Without results the page says how to produce them: the site never shows numbers
that were not measured on the machine that built it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
PAGE = "benchmarks/index.md"
MARKER = "<!-- bench-results -->"
REPORT = "report.md"  # bench/report.py: includes every other *.md, so it is shown alone


def on_files(files: Files, config: Any) -> Files:
    """Publishes every non-Markdown result file under `benchmarks/`."""
    if RESULTS.is_dir():
        for path in sorted(RESULTS.iterdir()):
            if path.is_file() and path.suffix != ".md":
                files.append(
                    File.generated(config, f"benchmarks/{path.name}", abs_src_path=str(path))
                )
    return files


def _demoted(markdown: str) -> str:
    return re.sub(r"^(#{1,5}) ", r"#\1 ", markdown, flags=re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Fills the marker with the results, or with a note that there are none."""
    if page.file.src_uri != PAGE or MARKER not in markdown:
        return markdown
    reports = sorted(RESULTS.glob("*.md")) if RESULTS.is_dir() else []
    if RESULTS / REPORT in reports:
        reports = [RESULTS / REPORT]
    plots = sorted(RESULTS.glob("*.png")) if RESULTS.is_dir() else []
    if not reports and not plots:
        note = (
            '!!! note "No results in this build"\n'
            "    This site was built without `bench/results/`. Run `make bench`, then "
            "`make docs`, to see them here.\n"
        )
        return markdown.replace(MARKER, note)
    parts = [_demoted(report.read_text(encoding="utf-8")) for report in reports]
    shown = "\n".join(parts)
    for plot in plots:
        if plot.name not in shown:
            parts.append(f"![{plot.stem}]({plot.name})")
    return markdown.replace(MARKER, "\n\n".join(parts))
