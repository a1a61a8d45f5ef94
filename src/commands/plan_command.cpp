#include "commands/plan_command.h"

#include "report/plan_report.h"
#include "train/run_setup.h"

namespace bigbatch {

ResolvedRun plan_session(const Session& session, bool sized, int64_t dataset_size,
                         double tokens_per_sample, int64_t world_size) {
  const TrainConfig& config = session.config;
  const DatasetSplits& data = session.data;
  if (sized)
    return resolve_run(config, dataset_size, world_size, tokens_per_sample);
  check_watched_metrics(config, data);  // as train would refuse them
  check_eval_every(config, data);
  ResolvedRun run =
      resolve_run(config, data.train.size(), world_size, items_per_sample(data.train));
  measure_token_cut(run, config, data.train);
  return run;
}

nlohmann::json plan_session_json(const Session& session, bool sized, const ResolvedRun& run) {
  nlohmann::json json = plan_json(run);
  json["dataset"] = sized ? nlohmann::json() : nlohmann::json(session.config.dataset);
  return json;
}

}  // namespace bigbatch
