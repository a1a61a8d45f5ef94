// --device (issue 19): what the CPU-only build can check here — the choices it resolves, the
// ones it refuses and how, a CPU batch never copied — and, skipped without a GPU, what only a
// GPU can: the card's memory counters and budget, the fit on the card, the engine's copies of
// pinned batches, bf16 autocast there, and the card's generator in checkpoints.
// bench/gpu_check.sh runs this suite on a GPU machine.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_paths.h"
#include "core/error.h"
#include "data/sampler.h"
#include "device/device.h"
#include "device/precision.h"
#include "dist/gradient_reducer.h"
#include "memory/cuda_memory.h"
#include "memory/tracking_allocator.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "train/accumulation_engine.h"
#include "train/micro_batch_fit.h"
#include "weight_difference.h"

namespace bigbatch {
namespace {

std::string error_of(const DeviceChoice& choice, int64_t local_rank = 0, int64_t world = 1) {
  try {
    resolve_device(choice, local_rank, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    return e.what();
  }
  return "";
}

TEST(Device, ResolvesTheCpuAndRefusesWhatThisBuildCannotDo) {
  EXPECT_EQ(resolve_device(DeviceChoice::parse("cpu"), 0, 1), torch::Device(torch::kCPU));
  if (torch::cuda::is_available())
    GTEST_SKIP() << "a GPU is visible: the refusals below are for builds without one";
  EXPECT_EQ(resolve_device(DeviceChoice::parse("auto"), 0, 1), torch::Device(torch::kCPU));
  const std::string cuda = error_of(DeviceChoice::parse("cuda"));
  const std::string indexed = error_of(DeviceChoice::parse("cuda:1"), 1, 2);
  if (!cuda_memory_supported()) {
    EXPECT_NE(cuda.find("--device cuda: this bigbatch is built against a libtorch without CUDA "
                        "(CPU only); use --device cpu"),
              std::string::npos)
        << cuda;
    EXPECT_NE(indexed.find("--device cuda:1: this bigbatch is built against"), std::string::npos)
        << indexed;
  } else {
    EXPECT_NE(cuda.find("no CUDA device is visible"), std::string::npos) << cuda;
  }
}

TEST(Device, OutOfMemoryMessagesFitOneLine) {
  const std::string cuda =
      "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB "
      "of which 1.2 GiB is free. Of the allocated memory 130 GiB is allocated by PyTorch.\n"
      "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF";
  EXPECT_EQ(short_out_of_memory_message(cuda), "CUDA out of memory. Tried to allocate 2.00 GiB.");
  const std::string budget =
      "memory budget exceeded: allocating 4 MiB with 10 MiB in use would "
      "pass the budget of 12 MiB";
  EXPECT_EQ(short_out_of_memory_message(budget), budget);
  EXPECT_EQ(short_out_of_memory_message("one. two\nthree"), "one. two");
}

TEST(DeviceFeed, OnTheCpuABatchIsNotCopied) {
  const Batch batch{torch::randn({4, 3}), torch::zeros({4}, torch::kInt64), 4};
  DeviceFeed feed(torch::Device(torch::kCPU));
  const Batch fed = feed.put(batch);
  EXPECT_EQ(fed.inputs.data_ptr(), batch.inputs.data_ptr());
  EXPECT_EQ(fed.targets.data_ptr(), batch.targets.data_ptr());
  feed.release_host();  // nothing to wait for
  EXPECT_EQ(to_device(batch, torch::Device(torch::kCPU)).inputs.data_ptr(),
            batch.inputs.data_ptr());
  EXPECT_EQ(model_device(*torch::nn::Linear(3, 2)), torch::Device(torch::kCPU));
}

// --- On a GPU -----------------------------------------------------------------------------

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available())
      GTEST_SKIP() << "no CUDA device";
    gpu_ = resolve_device(DeviceChoice::parse("cuda"), 0, 1);
    install_tracking_allocator();
    account_memory_on(gpu_);
    set_memory_budget(0);
  }
  void TearDown() override {
    if (!torch::cuda::is_available())
      return;
    set_memory_budget(0);
    account_memory_on(torch::Device(torch::kCPU));
  }
  torch::Device gpu_{torch::kCPU};
};

TEST_F(Gpu, ChoicesResolveToTheVisibleDevices) {
  const auto visible = static_cast<int64_t>(torch::cuda::device_count());
  EXPECT_EQ(resolve_device(DeviceChoice::parse("auto"), 0, 1), torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(resolve_device(DeviceChoice::parse("cuda"), 0, 1), torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(resolve_device(DeviceChoice::parse("cuda:0"), 0, 1), torch::Device(torch::kCUDA, 0));
  // Under a launcher with one visible device per rank, every rank takes its only one.
  if (visible == 1) {
    EXPECT_EQ(resolve_device(DeviceChoice::parse("cuda"), 3, 4), torch::Device(torch::kCUDA, 0));
  }
  const std::string past = error_of(DeviceChoice::parse("cuda:" + std::to_string(visible)));
  EXPECT_NE(past.find("visible (cuda:0"), std::string::npos) << past;
  resolve_device(DeviceChoice::parse("cuda"), 0, 1);  // back to the first device
}

TEST_F(Gpu, TheCardsBudgetRefusesAndItsCountersSeeIt) {
  release_cached_memory();
  reset_peak_memory();
  const int64_t before = memory_counters().current_bytes;
  {
    const auto held = torch::empty({16 << 20}, torch::TensorOptions(torch::kUInt8).device(gpu_));
    const MemoryCounters now = memory_counters();
    EXPECT_GE(now.current_bytes - before, int64_t{16} << 20);
    EXPECT_GE(now.peak_bytes, now.current_bytes);
  }
  EXPECT_EQ(memory_counters().current_bytes, before);
  set_memory_budget(int64_t{64} << 20);
  const int64_t refused = memory_counters().refused_allocations;
  EXPECT_THROW(torch::empty({int64_t{256} << 20}, torch::TensorOptions(torch::kUInt8).device(gpu_)),
               c10::OutOfMemoryError);
  EXPECT_GT(memory_counters().refused_allocations, refused);
  set_memory_budget(0);
  EXPECT_NO_THROW(
      torch::empty({int64_t{256} << 20}, torch::TensorOptions(torch::kUInt8).device(gpu_)));
  EXPECT_GT(device_memory_available(gpu_), int64_t{1} << 30);
  std::printf("[ %s ]\n", describe_device(gpu_).c_str());
}

TEST_F(Gpu, FitOnTheCardStaysUnderItsBudget) {
  torch::manual_seed(1);
  TensorDataset data;
  data.inputs = torch::randn({4096, 1, 28, 28});
  data.targets = torch::randint(0, 10, {4096}, torch::kInt64);
  data.classes = 10;
  const ModelFactory make = [] {
    ModelSpec spec;
    spec.name = "mlp";
    spec.hidden = {2048, 2048};
    return make_model(spec);
  };
  {
    // cuBLAS keeps a workspace per handle and stream for the process's life (tens of MiB on
    // Hopper): warm it up, so the budget below is what the probes themselves get.
    auto model = make();
    model->to(gpu_);
    model->forward(data.inputs.slice(0, 0, 8).to(gpu_)).sum().backward();
  }
  release_cached_memory();
  FitOptions options;
  options.device = gpu_;
  // The weights, gradients and momentum take ~67 MiB; activations ~50 KiB a sample.
  options.budget_bytes = memory_counters().current_bytes + (int64_t{160} << 20);
  options.max_micro_batch = 4096;
  options.seconds_per_probe = 0.05;
  const FitResult fit = fit_micro_batch(make, OptimizerSettings{}, data, options);
  std::printf("%s", fit.to_text().c_str());
  ASSERT_GT(fit.max_micro_batch, 0);
  EXPECT_LT(fit.max_micro_batch, 4096);  // the budget binds
  for (const FitProbe& probe : fit.table) {
    if (probe.fits) {
      EXPECT_LE(probe.peak_bytes, fit.usable_bytes);
    }
  }
}

// The engine's own path on `device`: the assembler's batches (pinned on a GPU) copied by the
// DeviceFeed, micro-steps accumulated, equal to one batch (fp32 to 1e-5; fp64 to the CPU's
// float64), also with a worker thread refilling the other buffer while the device computes.
void check_micro_steps_equal_one_batch(const torch::Device& target) {
  torch::manual_seed(99);
  TensorDataset data;
  data.inputs = torch::randn({256, 1, 28, 28});
  data.targets = data.inputs.mean({1, 2, 3}).mul(40).floor().remainder(10).to(torch::kInt64);
  data.classes = 10;
  const auto order = epoch_order(3, 0, data.size(), Shuffle::On);
  const auto gradient = [&](int64_t micro, torch::Device device, torch::Dtype dtype,
                            bool background = false) {
    torch::manual_seed(1234);
    ModelSpec spec;
    spec.name = "mlp";
    spec.hidden = {64, 32};
    auto model = make_model(spec);
    model->to(dtype);
    model->to(device);
    auto optimizer = make_optimizer(OptimizerSettings{}, model->parameters());
    LocalReducer reducer;
    AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
    TensorDataset typed = data;
    typed.inputs = data.inputs.to(dtype);
    BatchAssembler assembler(typed, micro, background, /*pinned=*/device.is_cuda());
    UpdateWindow window;
    window.begin = 0;
    window.size = 256;
    window.rank_begin = 0;
    window.rank_size = 256;
    window.micro_batch_sizes.assign(size_t(256 / micro), micro);
    EXPECT_TRUE(run_micro_steps(engine, assembler, order, window, 0, {}));
    const UpdateStats stats = engine.finish_gradients();
    EXPECT_EQ(stats.counts.items, 256);
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters())
      out.push_back(p.grad().to(torch::kCPU, torch::kFloat64));
    return out;
  };
  const auto reference = gradient(256, torch::Device(torch::kCPU), torch::kFloat64);
  const double fp32 = max_relative_difference(gradient(32, target, torch::kFloat32),
                                              gradient(256, target, torch::kFloat32));
  const double fp64 = max_relative_difference(gradient(32, target, torch::kFloat64), reference);
  // A worker thread refills the other pinned buffer while the card computes on this one.
  const double fp64_background =
      max_relative_difference(gradient(8, target, torch::kFloat64, /*background=*/true), reference);
  std::printf(
      "[ mlp, %s ] 8 x 32 vs 1 x 256: fp32 %.3g, fp64 against the CPU's %.3g; 32 x 8 "
      "gathered in the background %.3g\n",
      target.str().c_str(), fp32, fp64, fp64_background);
  EXPECT_LT(fp32, 1e-5);
  EXPECT_LT(fp64, 1e-12);
  EXPECT_LT(fp64_background, 1e-12);
}

TEST(DeviceFeed, MicroStepsOfAssembledBatchesEqualOneBatch) {
  check_micro_steps_equal_one_batch(torch::Device(torch::kCPU));
}

TEST_F(Gpu, MicroStepsOfPinnedBatchesEqualOneBatch) {
  check_micro_steps_equal_one_batch(gpu_);
}

TEST_F(Gpu, Bf16AutocastComputesOnTheCardInBf16) {
  const auto a = torch::randn({64, 64}, torch::TensorOptions().device(gpu_));
  {
    AutocastScope autocast(Precision::Bf16, c10::DeviceType::CUDA);
    EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kFloat32);
  {
    AutocastScope fp32(Precision::Fp32, c10::DeviceType::CUDA);
    EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kFloat32);
  }
}

// A checkpoint carries the generator of the model's device (the CPU's always): the draws after
// a resume are those the uninterrupted run makes, and the optimizer's state comes back where
// the parameters are.
void check_checkpoint_round_trip(const torch::Device& device) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("bigbatch_checkpoint_" + device.str())).string();
  std::filesystem::remove_all(dir);
  const auto on = torch::TensorOptions().device(device);
  torch::manual_seed(5);
  ModelSpec spec;
  spec.name = "mlp";
  spec.hidden = {16};
  auto model = make_model(spec);
  model->to(device);
  OptimizerSettings settings;
  settings.kind = OptimizerKind::AdamW;
  auto optimizer = make_optimizer(settings, model->parameters());
  model->forward(torch::randn({4, 1, 28, 28}, on)).sum().backward();
  optimizer->step();
  const nlohmann::json identity =
      checkpoint_identity("mlp", {16}, "synthetic", 4, 4, 5, true, "adamw");
  TrainingProgress progress;  // one update of the 4 samples, as the loop would count it
  progress.step = 1;
  progress.epoch = 1;
  progress.global_batch = 4;
  progress.samples_seen = 4;
  progress.items_seen = 4;
  write_checkpoint(dir, progress, identity, *model, *optimizer, 1, nlohmann::json::object());
  const auto expected = torch::rand({8}, on).cpu();
  torch::rand({100}, on);  // the generator moves on
  read_checkpoint(find_latest_checkpoint(dir), identity, *model, *optimizer);
  EXPECT_TRUE(torch::equal(torch::rand({8}, on).cpu(), expected));
  optimizer->zero_grad();
  model->forward(torch::randn({4, 1, 28, 28}, on)).sum().backward();
  EXPECT_NO_THROW(optimizer->step());  // its state read back beside the parameters
  std::filesystem::remove_all(dir);
}

TEST(Checkpoints, CarryTheCpusGenerator) {
  check_checkpoint_round_trip(torch::Device(torch::kCPU));
}

// An mlp of one hidden layer of `width` on the CPU, seeded, with its optimizer.
struct SmallMlp {
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};
SmallMlp small_mlp(int64_t width, OptimizerKind kind) {
  torch::manual_seed(5);
  ModelSpec spec;
  spec.name = "mlp";
  spec.hidden = {width};
  SmallMlp mlp{make_model(spec), nullptr};
  OptimizerSettings settings;
  settings.kind = kind;
  mlp.optimizer = make_optimizer(settings, mlp.model->parameters());
  return mlp;
}

// A snapshot in memory puts the weights, the optimizer's moments, the generator and the
// progress back exactly: training from it again gives the same bits.
TEST(Checkpoints, ASnapshotPutsTrainingBackBitForBit) {
  auto [model, optimizer] = small_mlp(16, OptimizerKind::AdamW);
  // Three steps on draws from the generator (as dropout would draw).
  const auto train = [&](int steps) {
    for (int i = 0; i < steps; ++i) {
      optimizer->zero_grad();
      model->forward(torch::randn({4, 1, 28, 28})).sum().backward();
      optimizer->step();
    }
  };
  train(3);
  TrainingProgress at;
  at.step = 3;
  at.growth.proposal = BatchDecision{3, 12, 4, 8, 1, 2, 3, 4, 1.1, 64};
  const TrainingSnapshot snapshot = TrainingSnapshot::take(*model, *optimizer, at);
  train(3);
  std::vector<torch::Tensor> first;
  for (const auto& p : model->parameters())
    first.push_back(p.detach().clone());
  at.step = 6;
  at.growth.proposal.reset();
  snapshot.restore(*model, *optimizer, at);
  EXPECT_EQ(at.step, 3);
  ASSERT_TRUE(at.growth.proposal.has_value());
  EXPECT_EQ(at.growth.proposal->test_samples, 64);
  train(3);
  const auto again = model->parameters();
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_TRUE(torch::equal(again[i], first[i])) << "parameter " << i;
}

// --global-batch auto's proposal, branch tests and cooldown go through state.json unchanged.
TEST(Checkpoints, KeepTheGrowthTestsAndAWaitingProposal) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / "bigbatch_checkpoint_growth").string();
  std::filesystem::remove_all(dir);
  auto [model, optimizer] = small_mlp(4, OptimizerKind::Sgd);
  const nlohmann::json identity =
      checkpoint_identity("mlp", {4}, "synthetic", 4, 4, 5, true, "sgd");
  TrainingProgress progress;
  progress.step = 30;
  progress.global_batch = 64;
  progress.samples_seen = 1600;
  progress.items_seen = 1600;
  progress.growth.update_cost = 12.5;
  const BatchDecision kept{20, 640, 32, 64, 100, 200, 400, 12.5, 1.2, 512};
  progress.growth.decisions = {kept};
  BatchTest test;
  test.proposal = kept;
  test.current_loss = 0.5;
  test.doubled_loss = 0.499;
  test.difference = -0.001;
  test.standard_error = 0.002;
  test.bound = 0.005;
  test.kept = true;
  test.extra_seconds = 1.5;
  BatchTest against_control = test;  // --growth-control temperature, rejected: three branches
  against_control.kept = false;
  against_control.control_rate_factor = 1 / std::sqrt(2.0);
  against_control.branches = 3;
  progress.growth.tests = {test, against_control};
  progress.growth.proposal = BatchDecision{30, 1600, 64, 128, 150, 300, 600, 12.5, 1.1, 1024};
  progress.growth.rejected_in_a_row = 2;
  write_checkpoint(dir, progress, identity, *model, *optimizer, 1, nlohmann::json::object());
  const TrainingProgress back =
      read_checkpoint(find_latest_checkpoint(dir), identity, *model, *optimizer);
  ASSERT_EQ(back.growth.decisions.size(), 1u);
  EXPECT_EQ(back.growth.decisions[0].test_samples, 512);
  ASSERT_EQ(back.growth.tests.size(), 2u);
  EXPECT_EQ(back.growth.tests[0].difference, -0.001);
  EXPECT_EQ(back.growth.tests[0].standard_error, 0.002);
  EXPECT_TRUE(back.growth.tests[0].kept);
  EXPECT_EQ(back.growth.tests[0].control_rate_factor, 1.0);
  EXPECT_EQ(back.growth.tests[0].branches, 2);
  EXPECT_FALSE(back.growth.tests[1].kept);
  EXPECT_EQ(back.growth.tests[1].control_rate_factor, 1 / std::sqrt(2.0));
  EXPECT_EQ(back.growth.tests[1].branches, 3);
  EXPECT_EQ(back.growth.tests[0].proposal.to_batch, 64);
  ASSERT_TRUE(back.growth.proposal.has_value());
  EXPECT_EQ(back.growth.proposal->to_batch, 128);
  EXPECT_EQ(back.growth.proposal->test_samples, 1024);
  EXPECT_EQ(back.growth.rejected_in_a_row, 2);
  std::filesystem::remove_all(dir);
}

TEST_F(Gpu, CheckpointsCarryTheCardsGeneratorAndKeepStateOnTheCard) {
  check_checkpoint_round_trip(gpu_);
}

}  // namespace
}  // namespace bigbatch
