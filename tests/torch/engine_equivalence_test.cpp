// The specification of the accumulation engine (docs/design.md, invariants 1-5): k micro-steps
// equal one step on a k-times larger batch, for gradients and for whole training runs,
// including a short final window and uneven micro-batches. BatchNorm is the documented
// exception, and a per-micro-batch-averaging engine (the classic bug) must be caught.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "batching/batch_plan.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/gradient_reducer.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "task/prediction_tally.h"
#include "train/accumulation_engine.h"
#include "train/train_step.h"
#include "weight_difference.h"

namespace bigbatch {
namespace {

// Gradients as tensors; a released gradient (undefined) reads as zeros.
std::vector<torch::Tensor> gradients_of(torch::nn::Sequential& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters())
    out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return out;
}

// The engine's options with clipping and the noise reading set, the rest at their defaults.
EngineOptions engine_options(double clip_norm, bool measure_noise = true) {
  EngineOptions options;
  options.clip_norm = clip_norm;
  options.measure_noise = measure_noise;
  return options;
}

std::vector<torch::Tensor> weights_of(torch::nn::Sequential& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters())
    out.push_back(p.detach().clone());
  return out;
}

torch::nn::Sequential seeded_model(const std::string& name) {
  torch::manual_seed(1234);
  ModelSpec spec;
  spec.name = name;
  spec.hidden = {64, 32};
  return make_model(spec);
}

// A synthetic but learnable dataset: labels depend on the pixels.
TensorDataset synthetic_dataset(int64_t n) {
  torch::manual_seed(99);
  TensorDataset data;
  data.inputs = torch::randn({n, 1, 28, 28});
  data.targets = data.inputs.mean({1, 2, 3}).mul(40).floor().remainder(10).to(torch::kInt64);
  return data;
}

// Mean gradient of one window split into micro-batches of the given sizes.
std::vector<torch::Tensor> window_gradient(const std::string& model_name, const TensorDataset& data,
                                           const std::vector<int64_t>& micro_sizes) {
  auto model = seeded_model(model_name);
  auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
  int64_t begin = 0;
  for (int64_t size : micro_sizes) {
    engine.micro_step(data.inputs.slice(0, begin, begin + size),
                      data.targets.slice(0, begin, begin + size));
    begin += size;
  }
  const UpdateStats stats = engine.finish_gradients();
  EXPECT_EQ(stats.counts.items, begin);
  return gradients_of(model);
}

class GradientEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientEquivalence, EightMicroStepsEqualOneBatchOfTwoFiftySix) {
  const auto data = synthetic_dataset(256);
  const auto big = window_gradient(GetParam(), data, {256});
  const auto accumulated = window_gradient(GetParam(), data, std::vector<int64_t>(8, 32));
  const double diff = max_relative_difference(accumulated, big);
  std::printf("[ %s ] 8 x 32 vs 1 x 256: max relative gradient difference %.3g\n",
              GetParam().c_str(), diff);
  RecordProperty("max_relative_difference", std::to_string(diff));
  EXPECT_LT(diff, 1e-5);
}

TEST_P(GradientEquivalence, UnevenMicroBatchesAreWeightedByTheirSize) {
  const auto data = synthetic_dataset(232);
  const auto big = window_gradient(GetParam(), data, {232});
  const auto uneven = window_gradient(GetParam(), data, {100, 100, 32});
  const double diff = max_relative_difference(uneven, big);
  std::printf("[ %s ] 100+100+32 vs 232: max relative gradient difference %.3g\n",
              GetParam().c_str(), diff);
  EXPECT_LT(diff, 1e-5);
}

// --task regress: the summed squared error over the window's samples, divided once by their
// count, is the big batch's mean (PyTorch's MSELoss(reduction='sum') / N), for one target per
// sample ([N]) and for several ([N, K]); float64, so to the rounding of the mathematics.
TEST(RegressionEquivalence, AccumulatedSquaredErrorIsTheBigBatchsMean) {
  for (const int64_t outputs : {int64_t{1}, int64_t{3}}) {
    torch::manual_seed(5);
    const int64_t n = 232;
    const torch::Tensor x = torch::randn({n, 1, 28, 28}, torch::kFloat64);
    torch::Tensor y = torch::randn({n, outputs}, torch::kFloat64).to(torch::kFloat32);
    if (outputs == 1)
      y = y.reshape({n});
    const auto regressor = [&] {
      torch::manual_seed(1234);
      ModelSpec spec;
      spec.name = "mlp";
      spec.hidden = {32};
      spec.classes = outputs;  // the output layer's width
      auto model = make_model(spec);
      model->to(torch::kFloat64);
      return model;
    };
    const auto gradients = [&](const std::vector<int64_t>& micro_sizes) {
      auto model = regressor();
      auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
      LocalReducer reducer;
      EngineOptions options;
      options.task = Task::of(*model, /*regression=*/true);
      AccumulationEngine engine(model, *optimizer, reducer, options);
      int64_t begin = 0;
      for (int64_t size : micro_sizes) {
        engine.micro_step(x.slice(0, begin, begin + size), y.slice(0, begin, begin + size));
        begin += size;
      }
      const UpdateStats stats = engine.finish_gradients();
      EXPECT_EQ(stats.counts.items, n);  // items are samples, whatever the outputs
      return std::make_pair(gradients_of(model), stats.counts.loss_sum);
    };
    const auto [accumulated, loss_sum] = gradients({100, 100, 32});
    // The formula, by hand: mean over samples of the per-sample summed squared error.
    auto model = regressor();
    const torch::Tensor error = model->forward(x).reshape(y.sizes()) - y.to(torch::kFloat64);
    (error.square().sum() / double(n)).backward();
    const double diff = max_relative_difference(accumulated, gradients_of(model));
    std::printf(
        "[ regress, %lld output(s) ] 100+100+32 vs the float64 mean over 232: max "
        "relative gradient difference %.3g\n",
        static_cast<long long>(outputs), diff);
    EXPECT_LT(diff, 1e-12);
    EXPECT_NEAR(loss_sum, error.square().sum().item<double>(), 1e-9 * loss_sum);
  }
}

INSTANTIATE_TEST_SUITE_P(BatchIndependentModels, GradientEquivalence,
                         ::testing::Values("mlp", "cnn", "cnn-gn"));

TEST(GradientEquivalence, BatchNormDiffersBecauseItNormalisesPerMicroBatch) {
  const auto data = synthetic_dataset(256);
  const auto big = window_gradient("cnn-bn", data, {256});
  const auto accumulated = window_gradient("cnn-bn", data, std::vector<int64_t>(8, 32));
  const double diff = max_relative_difference(accumulated, big);
  std::printf(
      "[ cnn-bn ] 8 x 32 vs 1 x 256: max relative gradient difference %.3g (expected: not equal)\n",
      diff);
  EXPECT_GT(diff, 1e-3) << "BatchNorm statistics per micro-batch should change the gradient";
}

// The bug class the engine rules out by construction: averaging each micro-batch's loss and
// dividing by the number of micro-steps over-weights a short micro-batch.
TEST(GradientEquivalence, PerMicroBatchAveragingIsDetected) {
  const auto data = synthetic_dataset(232);
  const auto big = window_gradient("mlp", data, {232});
  auto model = seeded_model("mlp");
  int64_t begin = 0;
  const std::vector<int64_t> sizes = {100, 100, 32};
  for (int64_t size : sizes) {
    auto logits = model->forward(data.inputs.slice(0, begin, begin + size));
    auto loss =
        torch::nn::functional::cross_entropy(logits, data.targets.slice(0, begin, begin + size)) /
        double(sizes.size());
    loss.backward();
    begin += size;
  }
  const double diff = max_relative_difference(gradients_of(model), big);
  std::printf("[ mlp ] naive per-micro-batch mean: max relative gradient difference %.3g\n", diff);
  EXPECT_GT(diff, 1e-3);
}

struct RunSettings {
  int64_t micro;
  int64_t accum;
  std::string model = "mlp";
  OptimizerKind optimizer = OptimizerKind::Sgd;
  double clip = 0;
  torch::Dtype dtype = torch::kFloat32;
  double tolerance = 1e-5;
};

// Trains `epochs` full epochs over `data` through the real sampler, plan and engine.
std::vector<torch::Tensor> train_run(const TensorDataset& float_data, const RunSettings& s,
                                     int64_t epochs, int64_t* updates = nullptr) {
  auto model = seeded_model(s.model);
  model->to(s.dtype);
  const TensorDataset data{float_data.inputs.to(s.dtype), float_data.targets};
  OptimizerSettings settings;
  settings.kind = s.optimizer;
  settings.momentum = 0.9;
  settings.nesterov = true;
  settings.weight_decay = 5e-4;
  auto optimizer = make_optimizer(settings, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, engine_options(s.clip));
  BatchRequest request;
  request.micro_batch_size = s.micro;
  request.accumulation_steps = s.accum;
  const BatchPlan plan = BatchPlan::resolve(request);
  const EpochPlan epoch_plan = plan_epoch(plan, data.size(), LastWindow::Keep);
  BatchAssembler assembler(data, plan.micro_batch_size);
  int64_t count = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    const auto order = epoch_order(7, epoch, data.size(), Shuffle::On);
    for (int64_t u = 0; u < epoch_plan.updates_per_epoch; ++u) {
      train_window(engine, assembler, order, window_for_update(plan, epoch_plan, u, 0),
                   s.optimizer == OptimizerKind::Sgd ? 0.05 : 1e-3);
      ++count;
    }
  }
  if (updates)
    *updates = count;
  return weights_of(model);
}

class RunEquivalence : public ::testing::TestWithParam<RunSettings> {};

TEST_P(RunEquivalence, ThirtyTwoByEightEndsWhereTwoFiftySixByOneEnds) {
  // 1000 samples at 256: three full updates and a short one of 232 (7 x 32 + 8) per epoch.
  const auto data = synthetic_dataset(1000);
  RunSettings accumulated = GetParam();
  RunSettings direct = GetParam();
  direct.micro = 256;
  direct.accum = 1;
  int64_t updates = 0;
  const auto a = train_run(data, accumulated, 2, &updates);
  const auto b = train_run(data, direct, 2);
  EXPECT_EQ(updates, 8);
  const double diff = max_relative_difference(a, b);
  std::printf(
      "[ %s %s ] %lld updates, 32 x 8 vs 256 x 1 (short final windows): max relative weight "
      "difference %.3g\n",
      GetParam().model.c_str(), c10::toString(GetParam().dtype), static_cast<long long>(updates),
      diff);
  EXPECT_LT(diff, GetParam().tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Models, RunEquivalence,
    // In float64 the two runs must agree to rounding of the mathematics itself. In float32 the
    // cnn's convolutions pick different kernels for batches of 32 and 256, whose rounding
    // differences (~3e-6 in one gradient, above) grow through 8 momentum updates to ~6e-5.
    ::testing::Values(RunSettings{32, 8, "mlp"},
                      RunSettings{32, 8, "cnn", OptimizerKind::Sgd, 0, torch::kFloat32, 2e-4},
                      RunSettings{32, 8, "mlp", OptimizerKind::Sgd, 0, torch::kFloat64, 1e-12},
                      RunSettings{32, 8, "cnn", OptimizerKind::Sgd, 0, torch::kFloat64, 1e-12},
                      RunSettings{32, 8, "mlp", OptimizerKind::AdamW},
                      RunSettings{32, 8, "mlp", OptimizerKind::Sgd, 0.5}),
    [](const ::testing::TestParamInfo<RunSettings>& param_info) {
      const RunSettings& s = param_info.param;
      return s.model + (s.optimizer == OptimizerKind::AdamW ? "_adamw" : "_sgd") +
             (s.clip > 0 ? "_clipped" : "") +
             (s.dtype == torch::kFloat64 ? "_float64" : "_float32");
    });

TEST(Engine, ClippingActsOnTheAccumulatedMeanGradient) {
  const auto data = synthetic_dataset(64);
  auto model = seeded_model("mlp");
  auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, engine_options(/*clip_norm=*/0.01));
  engine.micro_step(data.inputs.slice(0, 0, 32), data.targets.slice(0, 0, 32));
  engine.micro_step(data.inputs.slice(0, 32, 64), data.targets.slice(0, 32, 64));
  const UpdateStats stats = engine.finish_gradients();
  ASSERT_GT(stats.grad_norm, 0.01);
  double squared = 0;
  for (const auto& g : gradients_of(model))
    squared += g.pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(squared), 0.01, 1e-6);
  EXPECT_EQ(stats.micro_steps, 2);
  EXPECT_EQ(stats.counts.items, 64);
}

TEST(Engine, WindowLossAndCorrectPredictionsAreTheBigBatchs) {
  const auto data = synthetic_dataset(96);
  auto model = seeded_model("mlp");
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(data.inputs);
  }
  // Every other target is the untrained model's prediction, so some are right.
  const auto targets = torch::where(torch::arange(96) % 2 == 0, logits.argmax(1), data.targets);
  const double loss = torch::nn::functional::cross_entropy(logits, targets).item<double>();
  const int64_t correct = logits.argmax(1).eq(targets).sum().item<int64_t>();
  ASSERT_GE(correct, 48);
  auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
  engine.micro_step(data.inputs.slice(0, 0, 40), targets.slice(0, 0, 40));
  engine.micro_step(data.inputs.slice(0, 40, 96), targets.slice(0, 40, 96));
  const UpdateStats stats = engine.finish_gradients();
  EXPECT_NEAR(stats.loss(), loss, 1e-6);
  EXPECT_EQ(stats.counts.correct, correct);
}

// The host loop and the tensor operations it replaces agree, ties and NaN included; the
// tensor path (taken for what the host loop cannot read, as on an accelerator) agrees too.
TEST(PredictionTallyTest, HostCountsEqualTorchArgmaxAndTheTensorPath) {
  torch::manual_seed(5);
  // Rounded logits make ties common; a few rows get a NaN.
  auto logits = torch::randn({500, 10}).mul(2).round();
  logits.index_put_(
      {torch::randint(0, 500, {20}, torch::kInt64), torch::randint(0, 10, {20}, torch::kInt64)},
      std::numeric_limits<float>::quiet_NaN());
  const auto targets = torch::randint(0, 10, {500}, torch::kInt64);
  const auto loss = torch::randn({}).abs();
  const int64_t expected = logits.argmax(1).eq(targets).sum().item<int64_t>();

  PredictionTally host;
  host.add(logits.slice(0, 0, 200), loss, targets.slice(0, 0, 200));
  host.add(logits.slice(0, 200, 500), loss, targets.slice(0, 200, 500));
  EXPECT_EQ(host.correct(), expected);
  EXPECT_DOUBLE_EQ(host.loss_sum(), 2 * loss.item<double>());

  // Column-major logits are not what the host loop reads: the tensor path counts them.
  const auto transposed = logits.t().contiguous().t();
  ASSERT_FALSE(transposed.is_contiguous());
  PredictionTally tensors;
  tensors.add(transposed, loss, targets);
  EXPECT_EQ(tensors.correct(), expected);
  EXPECT_DOUBLE_EQ(tensors.loss_sum(), loss.item<double>());
  tensors.reset(1.5, 7);
  EXPECT_EQ(tensors.correct(), 7);
  EXPECT_DOUBLE_EQ(tensors.loss_sum(), 1.5);
}

TEST(Engine, NonFiniteWindowIsDiscardedWithoutTouchingWeightsOrMomentum) {
  auto data = synthetic_dataset(64);
  auto model = seeded_model("mlp");
  OptimizerSettings settings;
  settings.momentum = 0.9;
  auto optimizer = make_optimizer(settings, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
  engine.micro_step(data.inputs.slice(0, 0, 32), data.targets.slice(0, 0, 32));
  ASSERT_FALSE(engine.update(0.1).non_finite);  // builds momentum
  const auto before = weights_of(model);
  auto poisoned = data.inputs.slice(0, 32, 64).clone();
  poisoned[3][0][5][5] = std::numeric_limits<float>::quiet_NaN();
  engine.micro_step(poisoned, data.targets.slice(0, 32, 64));
  const UpdateStats stats = engine.update(0.1);
  EXPECT_TRUE(stats.non_finite);
  EXPECT_EQ(max_relative_difference(weights_of(model), before), 0.0);
  for (const auto& g : gradients_of(model))
    EXPECT_EQ(g.abs().sum().item<double>(), 0.0);
  // The next good window trains as if the bad one never happened (momentum intact).
  engine.micro_step(data.inputs.slice(0, 0, 32), data.targets.slice(0, 0, 32));
  EXPECT_FALSE(engine.update(0.1).non_finite);
}

TEST(Engine, FirstMicroStepIsTheNoiseScalesSmallBatch) {
  const auto data = synthetic_dataset(64);
  // The first micro-batch's mean gradient, computed on its own.
  double expected = 0;
  for (const auto& g : window_gradient("mlp", data, {16}))
    expected += g.pow(2).sum().item<double>();
  for (const bool announced : {true, false}) {
    auto model = seeded_model("mlp");
    auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
    LocalReducer reducer;
    AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
    if (announced)
      engine.begin_window(64, 64);
    for (int64_t begin = 0; begin < 64; begin += 16) {
      engine.micro_step(data.inputs.slice(0, begin, begin + 16),
                        data.targets.slice(0, begin, begin + 16),
                        begin == 48 ? AccumulationEngine::MicroStep::Last
                                    : AccumulationEngine::MicroStep::Accumulate);
    }
    const UpdateStats stats = engine.update(0.1);
    EXPECT_DOUBLE_EQ(stats.small_batch, 16.0);
    EXPECT_NEAR(stats.small_batch_sq_norm, expected, 1e-5 * expected) << announced;
    EXPECT_LT(stats.grad_norm * stats.grad_norm, stats.small_batch_sq_norm);  // averaging helps
  }
  // One micro-step has no smaller batch inside it; and the measurement can be switched off.
  for (const bool measure : {true, false}) {
    auto model = seeded_model("mlp");
    auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
    LocalReducer reducer;
    AccumulationEngine engine(model, *optimizer, reducer, engine_options(0.0, measure));
    engine.micro_step(
        data.inputs.slice(0, 0, 32), data.targets.slice(0, 0, 32),
        measure ? AccumulationEngine::MicroStep::Last : AccumulationEngine::MicroStep::Accumulate);
    if (!measure)
      engine.micro_step(data.inputs.slice(0, 32, 64), data.targets.slice(0, 32, 64));
    EXPECT_EQ(engine.update(0.1).small_batch, 0.0);
  }
}

// Stands in for a second rank: its totals are added to this rank's, and this rank's
// pre-reduction gradient norm is measured as the collective reducer measures it (its
// gradients count as zero: only the noise statistics are under test).
class TwoRankReducer final : public GradientReducer {
 public:
  explicit TwoRankReducer(const WindowTotals& other) : other_(other) {}
  WindowTotals reduce(std::vector<at::Tensor>& gradients, const WindowTotals& local) override {
    WindowTotals global = local;
    if (local.pre_reduction_norm_scale > 0) {
      for (size_t i = 0; i < gradients.size(); ++i) {
        const auto g = local.pre_reduction_norm_weight
                           ? gradients[i] * local.pre_reduction_norm_weight(i)
                           : gradients[i];
        global.small_sq_norm += g.pow(2).sum().item<double>() * local.pre_reduction_norm_scale;
      }
    }
    global.counts += other_.counts;
    global.small_batches += other_.small_batches;
    global.small_sq_norm += other_.small_sq_norm;
    global.small_inverse_items += other_.small_inverse_items;
    return global;
  }
  int64_t world_size() const override { return 2; }
  int64_t rank() const override { return 0; }
  int64_t calls() const override { return 0; }

 private:
  WindowTotals other_;
};

TEST(Engine, RanksAverageTheirSmallBatchesIntoOneEstimate) {
  const auto data = synthetic_dataset(64);
  // The other rank saw 48 samples; its small batch was 48 too, with squared norm 2.5.
  WindowTotals other;
  other.counts.samples = 48;
  other.counts.items = 48;
  other.counts.loss_sum = 1;
  other.small_batches = 1;
  other.small_sq_norm = 2.5;
  other.small_inverse_items = 1.0 / 48;
  // This rank: 4 x 16 (its first micro-batch is its small batch) or 1 x 32 (its whole window,
  // measured before the all-reduce), announced or not.
  struct Case {
    std::vector<int64_t> micro_sizes;
    int64_t small;
  };
  for (const Case& c : {Case{{16, 16, 16, 16}, 16}, Case{{32}, 32}}) {
    double own = 0;
    for (const auto& g : window_gradient("mlp", data, {c.small}))
      own += g.pow(2).sum().item<double>();
    for (const bool announced : {true, false}) {
      auto model = seeded_model("mlp");
      auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
      TwoRankReducer reducer(other);
      AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
      int64_t items = 0;
      for (int64_t size : c.micro_sizes)
        items += size;
      if (announced)
        engine.begin_window(items + 48, items + 48);
      int64_t begin = 0;
      for (size_t i = 0; i < c.micro_sizes.size(); ++i) {
        const int64_t size = c.micro_sizes[i];
        engine.micro_step(
            data.inputs.slice(0, begin, begin + size), data.targets.slice(0, begin, begin + size),
            i + 1 == c.micro_sizes.size() ? AccumulationEngine::MicroStep::Last
                                          : AccumulationEngine::MicroStep::Accumulate);
        begin += size;
      }
      const UpdateStats stats = engine.finish_gradients();
      // The harmonic mean of the sizes (E|g_b|^2 = |G|^2 + tr(Sigma) / b is linear in 1 / b)
      // and the mean of the squared norms.
      EXPECT_NEAR(stats.small_batch, 2.0 / (1.0 / double(c.small) + 1.0 / 48), 1e-9);
      EXPECT_NEAR(stats.small_batch_sq_norm, (own + 2.5) / 2, 1e-5 * (own + 2.5))
          << c.small << " " << announced;
    }
  }
}

// The mean gradient of data[0, size) at the model's current weights, in float64.
std::vector<torch::Tensor> gradient_at(torch::nn::Sequential& model, const TensorDataset& data,
                                       int64_t size) {
  auto plain_optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
  LocalReducer reducer;
  AccumulationEngine plain(model, *plain_optimizer, reducer, EngineOptions{});
  plain.micro_step(data.inputs.slice(0, 0, size), data.targets.slice(0, 0, size));
  plain.finish_gradients();
  std::vector<torch::Tensor> out;
  for (auto& g : gradients_of(model))
    out.push_back(g.to(torch::kFloat64));
  plain.discard();
  return out;
}

// sum((g * w)^2) in float64.
double weighted_sq_norm(const std::vector<torch::Tensor>& gradients,
                        const std::vector<torch::Tensor>& weights) {
  double sum = 0;
  for (size_t i = 0; i < gradients.size(); ++i)
    sum += (gradients[i] * weights[i]).pow(2).sum().item<double>();
  return sum;
}

TEST(Engine, PreconditionedNoiseNormsAreOfAdamsUpdateDirection) {
  const auto data = synthetic_dataset(64);
  for (const int64_t micro : {16, 32}) {
    // 4 x 16 in one process (the first micro-batch is the small batch), or 1 x 32 beside a
    // second rank of 32 (this rank's window, measured before the all-reduce).
    auto model = seeded_model("mlp");
    OptimizerSettings settings;
    settings.kind = OptimizerKind::AdamW;
    auto optimizer = make_optimizer(settings, model->parameters());
    LocalReducer local;
    WindowTotals other;
    other.counts = {32, 32, 1.0, 0};
    other.small_batches = 1;
    other.small_sq_norm = 0;
    other.small_inverse_items = 1.0 / 32;
    TwoRankReducer two_ranks(other);
    GradientReducer& reducer = micro == 16 ? static_cast<GradientReducer&>(local) : two_ranks;
    EngineOptions options;
    options.precondition_noise = true;
    AccumulationEngine engine(model, *optimizer, reducer, options);
    const int64_t window = micro == 16 ? 64 : 32;
    const auto train_window = [&] {
      for (int64_t begin = 0; begin < window; begin += micro) {
        engine.micro_step(data.inputs.slice(0, begin, begin + micro),
                          data.targets.slice(0, begin, begin + micro),
                          begin + micro == window ? AccumulationEngine::MicroStep::Last
                                                  : AccumulationEngine::MicroStep::Accumulate);
      }
    };
    // Until AdamW's second moment has settled (no second moment before its first step),
    // nothing is measured.
    for (int64_t step = 0; step < kPreconditionerSettleSteps; ++step) {
      train_window();
      EXPECT_EQ(engine.update(1e-3).small_batch, 0.0) << step;
    }
    // AdamW's 1 / (sqrt(v / (1 - beta2^t)) + eps), read from its state independently.
    std::vector<torch::Tensor> weights;
    for (const auto& p : model->parameters()) {
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(
          *optimizer->state().at(optimizer_state_key(p)));
      ASSERT_EQ(state.step(), kPreconditionerSettleSteps);
      weights.push_back(
          1.0 /
          ((state.exp_avg_sq().to(torch::kFloat64) / (1 - std::pow(0.999, 10))).sqrt() + 1e-8));
    }
    const double small = weighted_sq_norm(gradient_at(model, data, micro), weights);
    const auto big_gradient = gradient_at(model, data, window);
    const double big = weighted_sq_norm(big_gradient, weights);
    double raw_big = 0;
    for (const auto& g : big_gradient)
      raw_big += g.pow(2).sum().item<double>();
    train_window();
    const UpdateStats stats = engine.finish_gradients();
    if (micro == 16) {
      EXPECT_DOUBLE_EQ(stats.small_batch, 16.0);
      EXPECT_NEAR(stats.small_batch_sq_norm, small, 1e-5 * small);
      EXPECT_NEAR(stats.big_batch_sq_norm, big, 1e-5 * big);
    } else {
      // The other rank's small batch (squared norm 0) averaged in; this rank's gradients are
      // the "reduced" ones (the stand-in adds none).
      EXPECT_DOUBLE_EQ(stats.small_batch, 32.0);
      EXPECT_NEAR(stats.small_batch_sq_norm, small / 2, 1e-5 * small);
    }
    // The reported gradient norm (and clipping) stays the raw gradient's.
    if (micro == 16) {
      EXPECT_NEAR(stats.grad_norm * stats.grad_norm, raw_big, 1e-5 * raw_big);
    }
    // Adam's preconditioner rescales each coordinate by ~1 / |g|: not the raw norm.
    EXPECT_GT(std::abs(big / raw_big - 1), 0.5);
  }
}

TEST(Engine, RisingLearningRateInjectsNoMomentumJump) {
  // Goyal et al.'s remark 2: with momentum kept as v = m v + lr g (their eq. 10), changing the
  // rate needs v <- m (lr_new / lr_old) v + lr_new g. libtorch's SGD (as PyTorch's) keeps
  // u = m u + g and steps by lr u (eq. 9), which is that corrected trajectory by construction:
  // a warmup's rising rate scales the whole step, not only the newest gradient.
  torch::manual_seed(5);
  auto weight = torch::randn({16}, torch::requires_grad());
  OptimizerSettings settings;
  settings.momentum = 0.9;
  auto optimizer = make_optimizer(settings, {weight});
  const std::vector<double> rates = {0.01, 0.02, 0.04, 0.08, 0.16, 0.16};
  auto corrected = weight.detach().clone();
  auto uncorrected = weight.detach().clone();
  auto v_corrected = torch::zeros({16});
  auto v_uncorrected = torch::zeros({16});
  double previous = rates[0];
  for (double lr : rates) {
    const auto g = torch::randn({16});
    weight.mutable_grad() = g.clone();
    set_learning_rate(*optimizer, lr);
    optimizer->step();
    v_corrected = 0.9 * (lr / previous) * v_corrected + lr * g;
    corrected -= v_corrected;
    v_uncorrected = 0.9 * v_uncorrected + lr * g;
    uncorrected -= v_uncorrected;
    previous = lr;
  }
  EXPECT_LT((weight.detach() - corrected).abs().max().item<double>(), 1e-6);
  EXPECT_GT((weight.detach() - uncorrected).abs().max().item<double>(), 1e-3);
}

TEST(Engine, ApplyClearsTheWindow) {
  const auto data = synthetic_dataset(32);
  auto model = seeded_model("mlp");
  auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
  engine.micro_step(data.inputs, data.targets);
  engine.update(0.1);
  for (const auto& g : gradients_of(model))
    EXPECT_EQ(g.abs().sum().item<double>(), 0.0);
  engine.micro_step(data.inputs.slice(0, 0, 8), data.targets.slice(0, 0, 8));
  EXPECT_EQ(engine.finish_gradients().counts.items, 8);
}

}  // namespace
}  // namespace bigbatch
