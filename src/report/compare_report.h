#pragma once
// One page that overlays runs: `bigbatch report RUN_A RUN_B ...` — the comparison people make
// in TensorBoard or W&B, with the axis that matters for batch sizes: runs at different global
// batches do different numbers of updates for the same data, so the curves are drawn against
// samples (tokens for language models) as well as updates. Self-contained like report.html
// (inline SVG, no script). Torch-free.
//
//   write_comparison_report({"runs/b64", "runs/b1024"}, "compare.html");
#include <string>
#include <vector>

namespace bigbatch {

// The page's HTML. Throws bigbatch::Error (Io) naming a directory that holds no metrics.jsonl.
std::string render_comparison_report(const std::vector<std::string>& run_dirs);

// Writes the page to `path` atomically.
void write_comparison_report(const std::vector<std::string>& run_dirs, const std::string& path);

}  // namespace bigbatch
