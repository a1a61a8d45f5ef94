#include "train/run_engine.h"

#include <algorithm>

#include "config/option_table.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "data/sampler.h"
#include "device/precision.h"
#include "device/thread_tuning.h"
#include "dist/collective_reducer.h"
#include "models/model_choices.h"
#include "optim/optimizer.h"
#include "train/micro_batch_fit.h"
#include "train/run_setup.h"

namespace bigbatch {

std::unique_ptr<GradientReducer> make_reducer(const JobPlace& job, const TrainConfig& config) {
  if (job.world_size == 1)
    return std::make_unique<LocalReducer>();
  CollectiveOptions options;
  options.timeout_seconds = config.dist_timeout;
  options.bucket_bytes = static_cast<int64_t>(config.bucket_mb * 1024 * 1024);
  return make_collective_reducer(*job.env, options);
}

void choose_micro_batch(TrainConfig& config, const TensorDataset& train, const JobPlace& job,
                        GradientReducer& reducer, Console& console,
                        const ModelFactory& make_model) {
  const int64_t per_rank = largest_useful_micro_batch(config, job.world_size);
  const FitChoice choice =
      measure_fit_choice(config, train, per_rank, RecomputeProbe::WhenNothingFits, {}, make_model);
  const FitResult& fit = choice.chosen();
  if (fit.max_micro_batch == 0) {
    throw Error(ErrorKind::Memory,
                "not even a micro-batch of 1 fits the memory budget of " +
                    human_bytes(double(fit.budget_bytes)) + " (with the " +
                    format_double(100 * config.fit_margin) + "% margin) for " + config.model +
                    (choice.recomputed ? ", even with its blocks recomputed" : ""),
                "raise --memory-budget, or lower --fit-margin");
  }
  const int64_t fastest =
      fit.fastest_micro_batch > 0 ? fit.fastest_micro_batch : fit.max_micro_batch;
  int64_t picked = fastest;
  std::string evened;
  if (config.global_batch_schedule.empty() && !config.global_batch_auto) {
    // The same number of micro-steps in equal parts: no ragged last micro-batch, and a peak no
    // larger (a smaller size of a fitting one fits).
    const int64_t steps = (per_rank + fastest - 1) / fastest;
    const int64_t even = (per_rank + steps - 1) / steps;
    if (even < fastest) {
      evened = ", evened from " + std::to_string(fastest) + " to the same " +
               std::to_string(steps) + " micro-steps per update of " + std::to_string(per_rank) +
               " in equal parts";
      picked = even;
    }
  }
  // Rank 0's choice is every rank's (timings differ between processes).
  std::vector<torch::Tensor> chosen = {torch::tensor({picked, int64_t(choice.recompute)})};
  reducer.broadcast_from_first_rank(chosen);
  config.micro_batch = chosen[0][0].item<int64_t>();
  config.micro_batch_auto = false;
  if (chosen[0][1].item<int64_t>() != 0) {
    config.recompute = true;  // config.toml records it: a rerun or resume recomputes too
    console.say(
        "micro-batch auto: not even a micro-batch of 1 fits without --recompute; with "
        "it, micro-batches up to " +
        std::to_string(fit.max_micro_batch) +
        " do: the gpt's blocks are recomputed in the backward (the same weights, one "
        "more forward pass)");
  }
  console.say(
      "micro-batch auto: " + std::to_string(*config.micro_batch) + " (the fastest size that fits " +
      human_bytes(double(fit.usable_bytes)) + " = budget " + human_bytes(double(fit.budget_bytes)) +
      " less the margin" + evened + "; largest fitting " + std::to_string(fit.max_micro_batch) +
      (fit.probe_row_tokens > 0 ? "; probed at the longest rows, " +
                                      std::to_string(fit.probe_row_tokens) + " target tokens"
                                : std::string()) +
      "; 'bigbatch fit' shows the table)");
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(TrainingRun& r, Console& console) {
  OptimizerSettings settings = OptimizerSettings::from(r.config);
  if (const auto& adam = r.resolved.adam) {
    settings.adam_beta1 = adam->beta1;
    settings.adam_beta2 = adam->beta2;
    settings.adam_eps = adam->eps;
    console.say(std::string("adamw under the square-root rule (--adam-sqrt-adjust") +
                (r.adam_sqrt_adjust_by_default
                     ? ", the default under --global-batch auto; --no-adam-sqrt-adjust keeps the "
                       "betas"
                     : "") +
                "): " + describe(*adam) +
                (r.resolved.ramp ? " at the starting batch; each batch trains at its own" : ""));
  }
  console.say("optimizer: " + settings.describe());
  if (r.config.shard_optimizer) {
    if (r.reducer->world_size() > 1) {
      r.shards =
          std::make_unique<OptimizerShards>(r.model->parameters(), settings, *r.reducer,
                                            static_cast<int64_t>(r.config.bucket_mb * 1024 * 1024));
      console.say(
          "optimizer state sharded over " + std::to_string(r.reducer->world_size()) +
          " ranks (--shard-optimizer), whole parameters by size: " + r.shards->owners().describe());
      return r.shards->make_owned_optimizer();
    }
    console.say(
        "note: --shard-optimizer with one process: nothing to shard, the state stays "
        "whole (launch ranks with bigbatch launch --nproc N)");
  }
  return make_optimizer(settings, r.model->parameters());
}

void build_engine(TrainingRun& r, const PartialWindow& partial, Console& console) {
  r.precision = r.config.precision;
  if (r.precision == Precision::Bf16) {
    console.say(r.device.is_cuda() || cpu_has_native_bf16()
                    ? "precision: bf16 forward passes (autocast), fp32 weights, loss and gradient "
                      "accumulation"
                    : "warning: --precision bf16 on a CPU without native bf16 (no AVX-512 BF16 "
                      "or AMX): emulated, likely slower than fp32");
  }
  EngineOptions engine_options;
  engine_options.clip_norm = r.config.clip_norm;
  engine_options.measure_noise = r.config.noise_scale;
  engine_options.precondition_noise = r.config.preconditioned_noise();
  engine_options.precision = r.precision;
  engine_options.task = r.task();
  engine_options.shards = r.shards.get();
  r.engine =
      std::make_unique<AccumulationEngine>(r.model, *r.optimizer, *r.reducer, engine_options);
  if (r.config.bn_mode == BatchNormMode::Window && uses_batch_statistics(*r.model))
    r.window_bn = std::make_unique<WindowBatchNorm>(r.model, kBatchNormMomentum, r.precision);
  if (r.state.at.micro_step > 0)
    r.engine->restore_window(partial.window, partial.gradients);
}

void tune_threads(TrainingRun& r, Console& console) {
  if (r.config.threads != 0) {
    console.say("threads: " + std::to_string(r.threads) +
                (r.config.threads_from_run
                     ? " (the run's own, from its config.toml: a resume keeps the count it "
                       "started with, which keeps it bit for bit; --threads 0 measures again)"
                     : " (--threads)"));
    return;
  }
  if (r.device.is_cuda()) {
    // The host only queues kernels and gathers batches: its thread count is not what a
    // micro-step's time depends on, and timing it would train a copy on the GPU for nothing.
    console.say("threads: " + std::to_string(r.threads) + " (not measured: the model runs on " +
                r.device.str() + ")");
    torch::set_num_threads(static_cast<int>(r.threads));
    return;
  }
  try {
    // Under a token budget the plan's micro-batch is the whole window; a micro-step holds at
    // most the budget's rows of full length.
    const int64_t rows =
        r.config.micro_batch_tokens > 0
            ? std::max<int64_t>(1, r.config.micro_batch_tokens / r.data.train.width())
            : r.state.schedule->plan().micro_batch_size;
    BatchAssembler probe_batch(r.data.train, rows);
    const Batch batch = probe_batch.gather(
        epoch_order(r.config.seed, 0, r.data.train.size(), Shuffle::Off), 0, rows);
    const Task task = r.task();
    const auto micro_step = [&](torch::nn::Sequential& model) {
      backward_through(*model, task.loss(model, batch, Precision::Fp32).loss_sum);
    };
    const ThreadChoice choice = measure_fastest_thread_count(r.model, micro_step, r.threads);
    r.threads = choice.threads;
    console.say("threads: " + choice.describe());
  } catch (const c10::OutOfMemoryError&) {
    // The model's copy does not fit beside it; the training window's back-off handles the
    // micro-batch itself.
    console.say("threads: " + std::to_string(r.threads) +
                " (not measured: a measuring copy of the model does not fit the memory budget)");
  } catch (const c10::Error& e) {
    // A C++ program's module that is not torch::nn::Cloneable cannot be copied to measure on.
    if (!is_custom(r.config.model))
      throw;
    console.say("threads: " + std::to_string(r.threads) +
                " (not measured: the model cannot be cloned; derive it from torch::nn::Cloneable, "
                "or set threads)");
  }
  torch::set_num_threads(static_cast<int>(r.threads));
  // The resolved configuration names the count, so --config repeats the run exactly.
  r.config.threads = r.threads;
  if (r.job.is_main())
    atomic_write_file(r.run_dir + "/config.toml",
                      render_toml_config(r.config.with_absolute_paths()), Links::Replace);
}

}  // namespace bigbatch
