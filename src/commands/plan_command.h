#pragma once
// `bigbatch plan` and `bigbatch.plan`: the resolved plan of a session's configuration, over a
// given dataset size or over the data the session loaded (whose watched metrics and evaluations
// are checked as train checks them).
#include <cstdint>

#include <nlohmann/json.hpp>

#include "config/resolved_run.h"
#include "session/session.h"

namespace bigbatch {

// `sized`: plan over `dataset_size` samples of `tokens_per_sample` tokens (0: not token rows);
// otherwise over session.data.
ResolvedRun plan_session(const Session& session, bool sized, int64_t dataset_size,
                         double tokens_per_sample, int64_t world_size);

// plan --json's object: the plan, and the dataset it was made over (null when sized).
nlohmann::json plan_session_json(const Session& session, bool sized, const ResolvedRun& run);

}  // namespace bigbatch
