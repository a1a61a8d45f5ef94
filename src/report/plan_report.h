#pragma once
// The batch plan as people and programs read it: the text `bigbatch plan` prints and each run
// writes to plan.txt, and the JSON object of `bigbatch plan --json`.
#include <nlohmann/json.hpp>
#include <string>

#include "config/resolved_run.h"

namespace bigbatch {

std::string format_plan_text(const ResolvedRun& run);
// Under --micro-batch-tokens, the batch plan in one line: "global batch 64 x world 1, each
// window cut into micro-batches of at most 512 padded tokens: 14 micro-steps in epoch 1 (2 to
// 4 per window), 12% padding".
std::string describe_token_cut(const ResolvedRun& run);
nlohmann::json plan_json(const ResolvedRun& run);

}  // namespace bigbatch
