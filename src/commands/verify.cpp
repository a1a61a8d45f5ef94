#include "commands/verify.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "batching/batch_plan.h"
#include "batching/token_packing.h"
#include "config/resolved_run.h"
#include "core/error.h"
#include "core/text.h"
#include "data/sampler.h"
#include "device/device.h"
#include "device/resources.h"
#include "dist/gradient_reducer.h"
#include "io/safetensors.h"
#include "optim/optimizer.h"
#include "runtime/runtime_env.h"
#include "session/session.h"
#include "train/accumulation_engine.h"
#include "train/custom_problem.h"
#include "train/run_setup.h"
#include "train/train_step.h"
#include "train/window_batch_norm.h"

namespace bigbatch {

namespace {

struct TensorDifference {
  double max_abs = 0;
  double relative = 0;  // ||a - b|| / ||b||: relative to the tensor's own scale
};

TensorDifference difference(const torch::Tensor& a, const torch::Tensor& b) {
  TensorDifference d;
  const auto delta = a - b;
  d.max_abs = delta.abs().max().item<double>();
  const double scale = b.norm().item<double>();
  d.relative = scale > 0 ? delta.norm().item<double>() / scale : d.max_abs;
  return d;
}

// One side of the comparison: a model from the run's initial weights, trained for one update.
struct Side {
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> gradients;  // the update's mean gradient, per parameter
  std::vector<std::pair<std::string, torch::Tensor>> weights;  // after the update
  std::vector<std::string> dropout_off;                        // the dropout layers turned off
};

// Dropout is turned off: its masks are random draws, which micro-batches draw in another order
// than one batch, so no split could equal one batch with it on.
Side make_side(const TrainConfig& config, const TensorDataset& train, const BatchPlan& plan,
               const torch::Device& device, const CustomProblem* problem,
               torch::Dtype dtype = torch::kFloat32) {
  torch::manual_seed(config.seed);
  Side side{torch::nn::Sequential(nullptr), nullptr, {}, {}, {}};
  if (problem && (problem->make_probe_model || problem->make_model)) {
    side.model = problem->make_probe_model ? problem->make_probe_model() : problem->make_model();
    if (UserModuleImpl* module = as_user_module(*side.model))
      check_user_module(*module, config, train);
  } else {
    side.model = build_model(config, train);
  }
  if (!config.init_weights.empty())
    load_weights(config.init_weights, *side.model);
  side.model->to(device);
  if (dtype != torch::kFloat32)
    side.model->to(dtype);
  prepare_for_training(side.model, config, plan.accumulation_steps);
  side.dropout_off = dropout_layers(*side.model);
  turn_off_dropout(*side.model);
  side.optimizer = make_optimizer(OptimizerSettings::from(config), side.model->parameters());
  return side;
}

// The update through train_step, as training runs it: the gradients are read once they are
// final (between the reduction and the optimizer step), the weights after the step.
void train_side(Side& side, AccumulationEngine& engine, BatchAssembler& assembler,
                const std::vector<int64_t>& order, const UpdateWindow& window, double lr,
                WindowBatchNorm* window_bn, int64_t micro_batch_tokens) {
  StepRequest request(order, window);
  request.window_bn = window_bn;
  request.micro_batch_tokens = micro_batch_tokens;
  request.lr = lr;
  request.on_final_gradients = [&] {
    for (const auto& p : side.model->parameters())
      side.gradients.push_back(p.grad().detach().clone());
  };
  train_step(engine, assembler, request);
  for (const auto& named : side.model->named_parameters())
    side.weights.emplace_back(named.key(), named.value().detach().clone());
}

// The window as one batch in float64, from the same initial weights: the mathematics both fp32
// sides round, so it says which of them rounds closer (libtorch's convolution backward, for
// one, sums a whole micro-batch's terms in one fp32 run, and a longer run rounds further).
struct Float64Reference {
  std::vector<torch::Tensor> gradients;  // per parameter; empty when it could not run
  std::string failure;                   // why not
};

Float64Reference float64_reference(const TrainConfig& config, const TensorDataset& train,
                                   const BatchPlan& plan, const torch::Device& device,
                                   const CustomProblem* problem, const std::vector<int64_t>& order,
                                   const UpdateWindow& window, double lr) {
  const auto first = order.begin() + window.rank_begin;
  TensorDataset samples = train.select(std::vector<int64_t>(first, first + window.rank_size));
  if (samples.inputs.defined() && samples.inputs.is_floating_point())
    samples.inputs = samples.inputs.to(torch::kFloat64);
  if (samples.is_regression())
    samples.targets = samples.targets.to(torch::kFloat64);
  try {
    Side side = make_side(config, train, plan, device, problem, torch::kFloat64);
    EngineOptions options;
    options.clip_norm = config.clip_norm;
    options.measure_noise = false;
    options.task = Task::of(*side.model, samples);
    LocalReducer reducer;
    AccumulationEngine engine(side.model, *side.optimizer, reducer, options);
    BatchAssembler assembler(samples, samples.size());
    std::vector<int64_t> in_order(static_cast<size_t>(samples.size()));
    std::iota(in_order.begin(), in_order.end(), int64_t{0});
    UpdateWindow one;
    one.size = one.rank_size = samples.size();
    one.micro_batch_sizes = {samples.size()};
    train_side(side, engine, assembler, in_order, one, lr, nullptr, /*micro_batch_tokens=*/0);
    return {side.gradients, ""};
  } catch (const Error& e) {
    return {{}, e.problem()};
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    return {{}, what.substr(0, what.find('\n'))};
  }
}

// --micro-batch-tokens on token rows: the budget and how many micro-batches it cut the first
// window into (the budget 0: the plan's own micro-batches).
struct TokenCut {
  int64_t budget = 0;
  int64_t micro_steps = 0;
};

// Per tensor, and a verdict that tells fp32 reassociation from BatchNorm from anything else.
VerifyReport compare_sides(const TrainConfig& config, const BatchPlan& plan,
                           const UpdateWindow& window, double lr, const Side& accumulated,
                           Side& whole, const Float64Reference& reference,
                           const TokenCut& token_cut) {
  // fp32: a sum of a few hundred terms in another order differs in the last bits, which
  // convolutions and normalisation layers amplify to up to ~5e-5 of a small tensor's norm
  // (cnn-gn's biases); BatchNorm's per-micro-batch statistics and a per-micro-batch mean are
  // 1e-1-scale effects.
  constexpr double kTolerance = 1e-3;
  VerifyReport report;
  char line[256];
  report.text = "verify: " + config.model + " on " + model_device(*whole.model).str() +
                ", update 1 of " +
                (token_cut.budget > 0
                     ? "global batch " + std::to_string(plan.global_batch_size) + " cut into " +
                           std::to_string(token_cut.micro_steps) + " micro-batches of at most " +
                           std::to_string(token_cut.budget) + " padded tokens"
                     : plan.describe()) +
                " against one batch of the same " + std::to_string(window.size) +
                " samples, at lr " + format_significant(lr) + "\n";
  report.dropout_off = accumulated.dropout_off;
  if (!report.dropout_off.empty()) {
    report.text += "dropout turned off on both sides (" + join(report.dropout_off, ", ") +
                   "): its masks are random draws, which micro-batches draw in another order "
                   "than one batch, so with it on no split could equal one batch; training keeps "
                   "it on\n";
  }
  std::snprintf(line, sizeof line, "%-16s %14s %14s %14s %14s\n", "tensor", "grad max abs",
                "grad relative", "weight max abs", "weight relative");
  report.text += line;
  double worst = 0;
  for (size_t i = 0; i < whole.weights.size(); ++i) {
    const TensorDifference g = difference(accumulated.gradients[i], whole.gradients[i]);
    const TensorDifference w = difference(accumulated.weights[i].second, whole.weights[i].second);
    worst = std::max({worst, g.relative, w.relative});
    report.differences.push_back(
        {whole.weights[i].first, g.max_abs, g.relative, w.max_abs, w.relative, {}, {}});
    if (!reference.gradients.empty()) {
      const torch::Tensor exact = reference.gradients[i];
      report.differences.back().accumulated_vs_float64 =
          difference(accumulated.gradients[i].to(torch::kFloat64), exact).relative;
      report.differences.back().whole_vs_float64 =
          difference(whole.gradients[i].to(torch::kFloat64), exact).relative;
    }
    std::snprintf(line, sizeof line, "%-16s %14.3g %14.3g %14.3g %14.3g%s\n",
                  whole.weights[i].first.c_str(), g.max_abs, g.relative, w.max_abs, w.relative,
                  std::max(g.relative, w.relative) > kTolerance ? "  <- differs" : "");
    report.text += line;
  }
  report.largest_relative = worst;
  if (reference.gradients.empty()) {
    report.text +=
        "float64 reference: not computed (the model did not run in float64: " + reference.failure +
        ")\n";
  } else {
    double accumulated_error = 0;
    double whole_error = 0;
    for (const VerifyDifference& d : report.differences) {
      accumulated_error = std::max(accumulated_error, *d.accumulated_vs_float64);
      whole_error = std::max(whole_error, *d.whole_vs_float64);
    }
    const char* closer = accumulated_error < whole_error   ? "the micro-steps round closer"
                         : whole_error < accumulated_error ? "one batch rounds closer"
                                                           : "both round alike";
    report.text +=
        "float64 reference (the same samples as one batch in float64): gradients of "
        "the micro-steps within " +
        format_significant(accumulated_error, 2) + " of it, of one fp32 batch within " +
        format_significant(whole_error, 2) + ": " + closer +
        " (fp32 sums in another order round differently; a longer sum, as one large "
        "batch makes in a convolution's backward, rounds further)\n";
  }
  const auto batch_norm = batch_statistics_layers(*whole.model);
  if (worst <= kTolerance) {
    report.verdict = VerifyVerdict::Exact;
    report.text += "verdict: exact to fp32 tolerance (largest relative difference " +
                   format_significant(worst) + " <= " + format_significant(kTolerance) +
                   "): accumulation computes the update of one big batch\n";
  } else if (!batch_norm.empty()) {
    report.verdict = VerifyVerdict::BatchNorm;
    const std::string why =
        config.bn_mode == BatchNormMode::Window
            ? "they normalise with the statistics of all " + std::to_string(window.size) +
                  " samples (--bn-mode window: the forward pass is exact, and so are the "
                  "gradients of every layer after the last BatchNorm), but back-propagate as if "
                  "those statistics were constants, so the layers before them differ"
            : "they normalise over each micro-batch of " + std::to_string(plan.micro_batch_size) +
                  ", not over the " + std::to_string(window.size) + " samples";
    report.text += "verdict: differs because of BatchNorm in layers " + join(batch_norm, ", ") +
                   " (largest relative difference " + format_significant(worst) + "): " + why +
                   (is_torchscript_model(config.model) || is_custom(config.model)
                        ? "; use nn.GroupNorm in the module, or --bn-mode frozen, for exact "
                          "equivalence\n"
                        : "; use cnn-gn or --norm group for exact equivalence\n");
  } else {
    report.verdict = VerifyVerdict::Unexpected;
    report.text += "verdict: differs unexpectedly (largest relative difference " +
                   format_significant(worst) +
                   "): the model has no batch statistics, so micro-steps should equal one batch; "
                   "look for a loss averaged per micro-batch, a layer that sees the batch, or "
                   "randomness in the forward pass (dropout called as a function rather than "
                   "as a layer)\n";
  }
  return report;
}
}  // namespace

VerifyReport run_verify(const TrainConfig& given, bool break_normalisation_for_tests,
                        const CustomProblem* problem) {
  const bool custom_data = problem && is_custom(given.dataset);
  SessionRequest request;
  if (custom_data)
    request.data = SessionData::None;
  const Session session = open_session(given, request);
  TrainConfig config = session.config;
  config.eval_every = Interval::updates(0);  // said to be ignored: nothing of it is resolved
  const torch::Device device = session.device;
  const DatasetSplits& data = custom_data ? problem->data : session.data;
  const ResolvedRun run =
      resolve_run(config, data.train.size(), /*world_size=*/1, items_per_sample(data.train));
  const auto order =
      epoch_order(config.seed, 0, data.train.size(), config.shuffle ? Shuffle::On : Shuffle::Off);
  const UpdateWindow window = window_for_update(run.plan, run.epoch, 0, 0);
  // Under --micro-batch-tokens the window is cut by padded tokens, as training cuts it.
  TokenCut token_cut;
  token_cut.budget = data.train.is_tokens() ? config.micro_batch_tokens : 0;
  const int64_t tokens = token_cut.budget;
  if (tokens > 0) {
    const TokenPacking cut = pack_by_tokens(order.data() + window.rank_begin, window.rank_size,
                                            data.train.lengths, tokens);
    token_cut.micro_steps = static_cast<int64_t>(cut.micro_batch_sizes.size());
    if (token_cut.micro_steps < 2) {
      // A budget below one row of --seq-len is refused, so suggest at least that.
      const int64_t smaller = std::max(data.train.width(), cut.padded_tokens / 4);
      throw Error(
          ErrorKind::Usage,
          "the first window's " + std::to_string(window.size) + " samples (" +
              std::to_string(cut.padded_tokens) +
              " padded tokens) fit in one micro-batch of at most " + std::to_string(tokens) +
              " tokens: there is no accumulation to verify",
          smaller < cut.padded_tokens
              ? "give a smaller budget, e.g. --micro-batch-tokens " + std::to_string(smaller)
              : "give a larger --global-batch, e.g. " +
                    std::to_string(4 * run.plan.global_batch_size));
    }
  } else if (run.plan.accumulation_steps < 2) {
    throw Error(ErrorKind::Usage,
                "the plan " + run.plan.describe() + " has no accumulation to verify",
                "give a micro-batch smaller than the global batch, e.g. --micro-batch " +
                    std::to_string(std::max<int64_t>(1, run.plan.global_batch_size / 8)));
  }
  const double lr = run.schedule.lr_at(0);
  LocalReducer reducer;

  // The same initial weights twice, each with its own optimizer and engine: the plan's
  // micro-steps, and one micro-batch of the whole window.
  Side accumulated = make_side(config, data.train, run.plan, device, problem);
  {
    EngineOptions options;
    options.clip_norm = config.clip_norm;
    options.measure_noise = false;
    options.per_micro_batch_mean_for_tests = break_normalisation_for_tests;
    options.task = Task::of(*accumulated.model, data.train);
    AccumulationEngine engine(accumulated.model, *accumulated.optimizer, reducer, options);
    BatchAssembler assembler(data.train, run.plan.micro_batch_size);
    // --bn-mode window on the accumulating side only: the other side is one true batch.
    std::unique_ptr<WindowBatchNorm> window_bn;
    if (config.bn_mode == BatchNormMode::Window) {
      window_bn =
          std::make_unique<WindowBatchNorm>(accumulated.model, kBatchNormMomentum, Precision::Fp32);
    }
    train_side(accumulated, engine, assembler, order, window, lr, window_bn.get(), tokens);
  }
  Side whole = make_side(config, data.train, run.plan, device, problem);
  {
    EngineOptions options;
    options.clip_norm = config.clip_norm;
    options.measure_noise = false;
    options.task = Task::of(*whole.model, data.train);
    AccumulationEngine engine(whole.model, *whole.optimizer, reducer, options);
    BatchAssembler assembler(data.train, window.size);
    UpdateWindow one = window;
    one.micro_batch_sizes = {window.size};
    train_side(whole, engine, assembler, order, one, lr, nullptr, /*micro_batch_tokens=*/0);
  }
  const Float64Reference reference =
      float64_reference(config, data.train, run.plan, device, problem, order, window, lr);
  return compare_sides(config, run.plan, window, lr, accumulated, whole, reference, token_cut);
}

}  // namespace bigbatch
