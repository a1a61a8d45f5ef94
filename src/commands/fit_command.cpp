#include "commands/fit_command.h"

#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "batching/batch_plan.h"
#include "config/option_table.h"
#include "console/progress.h"
#include "core/error.h"
#include "core/text.h"
#include "device/device.h"
#include "device/resources.h"
#include "runtime/runtime_env.h"
#include "session/session.h"
#include "train/run_setup.h"

namespace bigbatch {

namespace {

// Each probe as it ends: one line rewritten in place on a terminal (the table that follows is
// the record, so every row is printed once), a line per probe when --progress lines asks.
std::function<void(int64_t, bool)> probe_progress(ProgressMode mode) {
  const bool terminal = ::isatty(::fileno(stderr)) != 0;
  if (mode == ProgressMode::Off || (mode == ProgressMode::Auto && !terminal))
    return {};
  if (mode == ProgressMode::Lines) {
    return [](int64_t micro, bool fits) {
      std::fprintf(stderr, "fit: micro-batch %lld %s\n", static_cast<long long>(micro),
                   fits ? "fits" : "does not fit");
    };
  }
  return [probes = 0](int64_t micro, bool fits) mutable {
    std::fprintf(stderr, "\rfit: probe %d, micro-batch %lld %s\x1b[K", ++probes,
                 static_cast<long long>(micro), fits ? "fits" : "does not fit");
    std::fflush(stderr);
  };
}

size_t rounds_of(const FitResult& fit, int64_t micro_batch) {
  const FitProbe* row = fit.row(micro_batch);
  return row ? row->rounds.size() : 0;
}

// What recomputation buys here, and whether the fit takes it.
std::string recompute_verdict(const FitChoice& choice) {
  const FitResult& plain = choice.plain;
  const FitResult& recomputed = *choice.recomputed;
  if (recomputed.max_micro_batch == 0)
    return "recomputing: no micro-batch fits either";
  std::string text =
      "recomputing: micro-batches up to " + std::to_string(recomputed.max_micro_batch) + " fit (" +
      (plain.max_micro_batch > 0 ? std::to_string(plain.max_micro_batch) + " without)"
                                 : std::string("none without)"));
  const FitProbe* fast = recomputed.row(recomputed.fastest_micro_batch);
  const FitProbe* base = plain.row(plain.fastest_micro_batch);
  if (fast && base && fast->samples_per_s > 0 && base->samples_per_s > 0) {
    text += ", at " + format_fixed(fast->samples_per_s / base->samples_per_s, 2) +
            "x the samples/s of the fastest without";
  }
  return text +
         (choice.recompute
              ? (plain.max_micro_batch == 0 ? ": the only way to fit, so the fit takes it"
                                            : ": faster beyond the noise, so the fit takes it")
              : ": not taken (accumulation trains the same update at the smaller "
                "micro-batch, for less compute)");
}

}  // namespace

FitReport run_fit(const TrainConfig& config, int64_t world_size) {
  SessionRequest request;
  request.memory = MemoryAccounting::Budgeted;  // the budget is what fit measures against
  request.check_before_data = [world_size](const TrainConfig&, const JobPlace&) {
    check_config(world_size >= 1, "--world-size must be 1 or more", "e.g. --world-size 4");
  };
  const Session session = open_session(config, request);
  const torch::Device device = session.device;
  const DatasetSplits& data = session.data;
  torch::manual_seed(config.seed);
  // Past a rank's share of the global batch no run of this configuration trains; and far past
  // any size worth a single pass on one device, a bound on the search's time.
  constexpr int64_t kLargestProbe = 65536;
  const int64_t useful = largest_useful_micro_batch(config, world_size);
  const int64_t cap = std::min({kLargestProbe, useful, data.train.size()});
  const auto progress = probe_progress(config.progress);
  const FitChoice choice =
      measure_fit_choice(config, data.train, cap, RecomputeProbe::Always, progress);
  const FitResult& fit = choice.chosen();
  if (progress && config.progress != ProgressMode::Lines)
    std::fprintf(stderr, "\r\x1b[K");
  FitReport report;
  report.max_micro_batch = fit.max_micro_batch;
  nlohmann::json json = choice.plain.to_json();
  if (choice.recomputed) {
    json["recomputed"] = choice.recomputed->to_json();
    json["recompute"] = choice.recompute;
  }
  report.json = json.dump(2);
  const std::string budget_source = config.memory_budget > 0 ? ""
                                    : device.is_cuda()       ? ", the device's free memory"
                                                             : ", the memory available now";
  report.text = config.model + " with " + to_string(config.optimizer) + " on " +
                describe_device(device) + ", budget " + human_bytes(double(fit.budget_bytes)) +
                budget_source + " (usable " + human_bytes(double(fit.usable_bytes)) +
                " after the " + format_double(100 * config.fit_margin) + "% margin), " +
                std::to_string(torch::get_num_threads()) + " thread(s)\n";
  if (cap == useful && config.global_batch_auto) {
    report.text += "searched up to micro-batch " + std::to_string(cap) +
                   ": the automatic batch starts at the micro-batch (at most --max-global-batch, "
                   "or the default 256, per rank)\n";
  } else if (cap == useful) {
    report.text += "searched up to micro-batch " + std::to_string(cap) + ": " +
                   (world_size > 1 ? "a rank's share of " : std::string()) + "the global batch " +
                   std::to_string(config.global_batch.value_or(kDefaultGlobalBatchSize)) +
                   (config.global_batch ? "" : " (the default; --global-batch searches further)") +
                   "\n";
  }
  if (fit.probe_row_tokens > 0) {
    report.text += "each size probed at the longest rows (" + std::to_string(fit.probe_row_tokens) +
                   " target tokens, the widest micro-batch a window can hold)\n";
  }
  report.text += choice.plain.to_text();
  if (choice.recomputed) {
    report.text +=
        "with --recompute (each block recomputed in the backward: the same weights, "
        "one more forward pass):\n" +
        choice.recomputed->to_text() + recompute_verdict(choice) + "\n";
  }
  if (fit.max_micro_batch == 0) {
    report.text += "not even a micro-batch of 1 fits: raise --memory-budget\n";
  } else {
    const std::string given =
        flags_set_in(config, {"global-batch", "micro-batch", "accum-steps", "micro-batch-tokens",
                              "memory-budget", "fit-margin", "out", "progress"}) +
        (choice.recompute ? " --recompute" : "");
    const std::string global_flag =
        config.global_batch ? std::to_string(*config.global_batch) : std::string("G");
    std::string as_fast;
    for (const int64_t size : fit.as_fast)
      as_fast += (as_fast.empty() ? "" : ", ") + std::to_string(size);
    report.text += "largest fitting micro-batch: " + std::to_string(fit.max_micro_batch) +
                   "\nfastest fitting micro-batch: " + std::to_string(fit.fastest_micro_batch) +
                   " (the median of " + std::to_string(rounds_of(fit, fit.fastest_micro_batch)) +
                   " timing rounds" +
                   (as_fast.empty() ? std::string()
                                    : "; " + as_fast + " within its noise, the largest named") +
                   ")";
    if (config.micro_batch_tokens > 0 && fit.probe_row_tokens > 0) {
      // Micro-batches cut by tokens: the fitting rows of the longest length, as a token bound.
      report.text += "\ntrain with it: bigbatch train" + given + " --global-batch " + global_flag +
                     " --micro-batch-tokens " +
                     std::to_string(fit.fastest_micro_batch * fit.probe_row_tokens) + " (" +
                     std::to_string(fit.fastest_micro_batch) + " of the longest rows, " +
                     std::to_string(fit.probe_row_tokens) + " tokens each)\n";
    } else {
      report.text +=
          "\ntrain with it: bigbatch train" + given + " --global-batch " + global_flag +
          " --micro-batch " + std::to_string(fit.fastest_micro_batch) + " (or --micro-batch auto" +
          (config.memory_budget > 0 ? " --memory-budget " + exact_byte_size(fit.budget_bytes)
                                    : std::string()) +
          ")\n";
    }
  }
  return report;
}

}  // namespace bigbatch
