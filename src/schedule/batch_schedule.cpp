#include "schedule/batch_schedule.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {
constexpr const char* kForm =
    "write steps THRESHOLD:GLOBAL_BATCH from 0, thresholds in samples or epochs, e.g. "
    "--global-batch-schedule \"0:256 200000s:1024 1e6s:4096\"";

[[noreturn]] void bad_schedule(const std::string& what) {
  throw Error(ErrorKind::Config, "--global-batch-schedule: " + what, kForm);
}

// Epoch thresholds compare as fractional epochs, sample thresholds as samples.
bool reached(const Interval& at, const TrainingPosition& p, int64_t dataset_size) {
  if (at.unit() == Interval::Unit::Epochs) {
    return double(p.epoch) + double(p.position_in_epoch) / double(dataset_size) >=
           at.value() - 1e-12;
  }
  return double(p.samples_seen) >= at.value();
}
}  // namespace

GlobalBatchSchedule GlobalBatchSchedule::parse(const std::string& text) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  GlobalBatchSchedule schedule;
  for (const auto& word : split(spaced, ' ')) {
    const std::string step = trim(word);
    if (step.empty())
      continue;
    const auto colon = step.find(':');
    if (colon == std::string::npos)
      bad_schedule("step '" + step + "' has no ':' between threshold and batch");
    const Interval at = Interval::parse(step.substr(0, colon));
    if (at.unit() == Interval::Unit::Updates && !at.is_zero()) {
      bad_schedule("step '" + step +
                   "' counts updates, whose size is what the schedule changes; count samples "
                   "(s) or epochs (e)");
    }
    if (at.unit() == Interval::Unit::Tokens && !at.is_zero()) {
      bad_schedule("step '" + step +
                   "' counts tokens; the batch ramp switches on samples or epochs, which it "
                   "plans ahead exactly");
    }
    const auto batch = parse_int(step.substr(colon + 1));
    if (!batch || *batch <= 0)
      bad_schedule("step '" + step + "' needs a positive whole global batch after ':'");
    if (schedule.steps_.empty() && !at.is_zero())
      bad_schedule("the first step must be at 0 (the batch training starts with), got '" + step +
                   "'");
    if (!schedule.steps_.empty()) {
      const Interval& before = schedule.steps_.back().at;
      if (at.is_zero() ||
          (before.unit() == at.unit() && !before.is_zero() && at.value() <= before.value())) {
        bad_schedule("thresholds must increase: '" + step + "' comes after '" + before.to_string() +
                     "'");
      }
    }
    schedule.steps_.push_back({at, *batch});
  }
  if (schedule.steps_.empty())
    bad_schedule("no steps in '" + text + "'");
  return schedule;
}

std::string GlobalBatchSchedule::to_string() const {
  std::string text;
  for (const auto& step : steps_) {
    if (!text.empty())
      text += ' ';
    text += (step.at.is_zero() ? std::string("0") : step.at.to_string()) + ":" +
            std::to_string(step.global_batch);
  }
  return text;
}

int64_t GlobalBatchSchedule::global_batch_at(const TrainingPosition& position,
                                             int64_t dataset_size) const {
  BB_INTERNAL_ASSERT(!steps_.empty(), "an empty batch schedule has no batch");
  int64_t batch = steps_.front().global_batch;
  for (const auto& step : steps_) {
    if (reached(step.at, position, dataset_size))
      batch = step.global_batch;
  }
  return batch;
}

std::vector<RampPhase> simulate_ramp(const GlobalBatchSchedule& schedule,
                                     const std::function<BatchPlan(int64_t)>& plan_for,
                                     int64_t dataset_size, LastWindow last_window, int64_t epochs,
                                     int64_t max_updates) {
  std::vector<RampPhase> phases;
  TrainingPosition at;
  int64_t updates = 0;
  BatchPlan plan;
  for (at.epoch = 0; at.epoch < epochs && updates < max_updates; ++at.epoch) {
    at.position_in_epoch = 0;
    while (updates < max_updates) {
      const int64_t global = schedule.global_batch_at(at, dataset_size);
      if (phases.empty() || phases.back().global_batch != global) {
        plan = plan_for(global);
        phases.push_back({global, plan.accumulation_steps, updates, 0, 0, 0});
      }
      const UpdateWindow window =
          window_at(plan, dataset_size, last_window, at.position_in_epoch, /*rank=*/0);
      if (window.size == 0)
        break;
      RampPhase& phase = phases.back();
      ++phase.updates;
      phase.samples += window.size;
      if (window.size < global)
        ++phase.short_windows;
      ++updates;
      at.samples_seen += window.size;
      at.position_in_epoch += window.size;
    }
  }
  // A step reached only where no update followed (the run's very end) trained nothing.
  phases.erase(std::remove_if(phases.begin(), phases.end(),
                              [](const RampPhase& p) { return p.updates == 0; }),
               phases.end());
  return phases;
}

}  // namespace bigbatch
