#pragma once
// report.html: one self-contained page per run (inline SVG charts, inline CSS, no script, no
// network), built from the run directory's own files — metrics.jsonl, plan.txt, config.toml —
// so it can be rebuilt at any time, also for a run that is still going or was interrupted.
// Written at the end of `bigbatch train`; `bigbatch report RUN_DIR` writes it on demand.
//
//   write_run_report("runs/20261130-101500");   // -> runs/20261130-101500/report.html
#include <string>
#include <vector>

namespace bigbatch {

// The page's HTML. Throws bigbatch::Error (Io) when the directory holds no metrics.jsonl. Lines
// of metrics.jsonl that are no record are skipped, listed on the page and, when asked, in
// `skipped_lines` ("line 7: not JSON: ...").
std::string render_run_report(const std::string& run_dir,
                              std::vector<std::string>* skipped_lines = nullptr);

// Writes run_dir/report.html atomically and returns its path.
std::string write_run_report(const std::string& run_dir,
                             std::vector<std::string>* skipped_lines = nullptr);

}  // namespace bigbatch
