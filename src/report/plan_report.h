#pragma once
// The batch plan as people and programs read it: the text `bigbatch plan` prints and each run
// writes to plan.txt, and the JSON object of `bigbatch plan --json`.
#include <nlohmann/json.hpp>
#include <string>

#include "config/resolved_run.h"

namespace bigbatch {

std::string format_plan_text(const ResolvedRun& run);
nlohmann::json plan_json(const ResolvedRun& run);

}  // namespace bigbatch
