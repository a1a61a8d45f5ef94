// Memory as a budget: the tracking allocator counts what libtorch allocates (also oneDNN's
// raw allocations), enforces the budget with libtorch's own out-of-memory error — which must
// reach the caller through autograd unchanged, since the engine backs off on it — and the
// measurements behind `bigbatch fit` and the accumulation claim (peak memory does not grow
// with accumulation steps).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "data/dataset.h"
#include "dist/gradient_reducer.h"
#include "memory/tracking_allocator.h"
#include "models/gpt.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "train/accumulation_engine.h"
#include "train/micro_batch_fit.h"

namespace bigbatch {
namespace {

class MemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    install_tracking_allocator();
    set_memory_budget(0);
    torch::set_num_threads(1);
  }
  void TearDown() override { set_memory_budget(0); }
};

TensorDataset random_images(int64_t n) {
  UntrackedAllocations host_data;
  torch::manual_seed(3);
  return {torch::randn({n, 1, 28, 28}), torch::randint(0, 10, {n}, torch::kInt64)};
}

TEST_F(MemoryTest, CountsEveryTensorAndItsRelease) {
  const int64_t before = memory_counters().current_bytes;
  {
    auto t = torch::empty({1024, 256});  // 1 MiB
    EXPECT_EQ(memory_counters().current_bytes - before, 1 << 20);
    reset_peak_memory();
    { auto u = torch::empty({1024, 512}); }
    EXPECT_EQ(memory_counters().peak_bytes - before, 3 << 20);
  }
  EXPECT_EQ(memory_counters().current_bytes, before);
  reset_peak_memory();
  EXPECT_EQ(memory_counters().peak_bytes, before);
  {
    UntrackedAllocations host_data;
    auto t = torch::empty({1024, 1024});
    EXPECT_EQ(memory_counters().current_bytes, before);
  }
  EXPECT_EQ(memory_counters().current_bytes, before);
}

TEST_F(MemoryTest, LargeBlocksAreReusedAcrossShapesThatDifferALittle) {
  release_cached_memory();
  const void* first = nullptr;
  { first = torch::empty({1000, 1000}).data_ptr(); }  // 3.8 MiB, then idle
  const int64_t mapped = host_block_cache_counters().mapped_blocks;
  // A little smaller than the first block's class: it reuses the block.
  EXPECT_EQ(torch::empty({990, 1000}).data_ptr(), first);
  EXPECT_EQ(host_block_cache_counters().mapped_blocks, mapped);
  // A little larger: a new block (the first is idle again, and too small).
  auto larger = torch::empty({1100, 1000});
  EXPECT_EQ(host_block_cache_counters().mapped_blocks, mapped + 1);
  // Small tensors and data loaded outside the budget stay with malloc.
  { auto small = torch::empty({1000}); }
  {
    UntrackedAllocations host_data;
    auto dataset = torch::empty({2000, 1000});
  }
  EXPECT_EQ(host_block_cache_counters().mapped_blocks, mapped + 1);
}

TEST_F(MemoryTest, AnIdleBlockServesNoRequestUnderHalfItsSize) {
  // A small tensor that took a large idle block would leave the next large request to map
  // another: what is mapped would pass its bound with nothing idle left to give back.
  release_cached_memory();
  const void* large = nullptr;
  { large = torch::empty({16, 1024, 1024}).data_ptr(); }  // 64 MiB, then idle
  auto small = torch::empty({1, 1024, 1024});             // 4 MiB
  EXPECT_NE(small.data_ptr(), large);
  auto half = torch::empty({9, 1024, 1024});  // 36 MiB: the idle 64 MiB block serves it
  EXPECT_EQ(half.data_ptr(), large);
}

TEST_F(MemoryTest, EverChangingShapesKeepTheMappedBytesWithinTwiceTheirPeak) {
  // A language model's micro-batches: [rows, longest] with rows * longest about constant and
  // attention's [rows, longest, longest] growing with the length, in a different order each
  // "epoch" -- the pattern under which glibc's heap kept growing (issue 36).
  release_cached_memory();  // a new peak: earlier tests' sizes are not this one's
  std::mt19937 order(7);
  std::vector<int64_t> lengths(200);
  std::iota(lengths.begin(), lengths.end(), 57);
  int64_t kept_idle = 0;
  for (int epoch = 0; epoch < 5; ++epoch) {
    std::shuffle(lengths.begin(), lengths.end(), order);
    for (int64_t length : lengths) {
      const int64_t rows = 16384 / length;
      std::vector<torch::Tensor> step;
      step.push_back(torch::ones({rows, length, 64}));
      step.push_back(torch::ones({rows, length, length}));
      step.push_back(torch::ones({rows, length, 256}));
      step.pop_back();
      step.push_back(torch::ones({rows, length, length}));
      const HostBlockCacheCounters c = host_block_cache_counters();
      // Blocks in use are at most 2.25x their requests; idle ones are kept only within the bound.
      EXPECT_LE(double(c.in_use_bytes), 2.25 * double(c.requested_in_use_bytes));
      if (c.idle_bytes > 0) {
        EXPECT_LE(c.in_use_bytes + c.idle_bytes, 2 * c.requested_peak_bytes) << "length " << length;
      }
      kept_idle = std::max(kept_idle, c.idle_bytes);
    }
  }
  const HostBlockCacheCounters end = host_block_cache_counters();
  EXPECT_GT(kept_idle, 0);  // the cache did keep blocks for reuse
  // Reuse, not a mapping per tensor: 4 tensors x 200 lengths x 5 epochs were asked for.
  EXPECT_LT(end.mapped_blocks, 4 * 200 * 5 / 4);
  release_cached_memory();
  EXPECT_EQ(host_block_cache_counters().idle_bytes, 0);
}

TEST_F(MemoryTest, IdleBlocksNeverKeepTheMappedBytesAboveTheBudget) {
  release_cached_memory();
  set_memory_budget(memory_counters().current_bytes + (48 << 20));
  { auto a = torch::empty({8, 1024, 1024}); }  // 32 MiB, idle: within the 48 MiB budget
  EXPECT_GT(host_block_cache_counters().idle_bytes, 0);
  { auto b = torch::empty({10, 1024, 1024}); }  // 40 MiB: a new 44 MiB block, 32 + 44 would pass it
  const HostBlockCacheCounters c = host_block_cache_counters();
  EXPECT_LE(c.in_use_bytes + c.idle_bytes, int64_t{48} << 20);
  set_memory_budget(0);
}

TEST_F(MemoryTest, BudgetRaisesLibtorchsOutOfMemoryErrorAndChargesNothing) {
  const int64_t before = memory_counters().current_bytes;
  set_memory_budget(before + (4 << 20));
  auto fits = torch::empty({1024, 1024});  // 4 MiB: exactly the room left
  EXPECT_THROW(torch::empty({16}), c10::OutOfMemoryError);
  EXPECT_EQ(memory_counters().current_bytes - before, 4 << 20);
  set_memory_budget(0);
  EXPECT_NO_THROW(torch::empty({16}));
}

TEST_F(MemoryTest, ConvolutionsRunOnTheTrackingAllocator) {
  // oneDNN allocates through raw_allocate(), which needs context == data and a raw_deleter.
  torch::manual_seed(0);
  auto model = make_model({.name = "cnn-bn"});
  const auto data = random_images(16);
  reset_peak_memory();
  const int64_t before = memory_counters().current_bytes;
  auto loss = torch::nn::functional::cross_entropy(model->forward(data.inputs), data.targets);
  loss.backward();
  EXPECT_GT(memory_counters().peak_bytes - before, 16 * 32 * 28 * 28 * 4);
}

TEST_F(MemoryTest, OutOfMemoryInsideBackwardReachesTheCallerAsItself) {
  torch::manual_seed(0);
  auto model = make_model({.name = "cnn"});
  const auto data = random_images(64);
  auto loss = torch::nn::functional::cross_entropy(model->forward(data.inputs), data.targets);
  // Room for nothing more: the first gradient buffer of backward fails.
  set_memory_budget(memory_counters().current_bytes + 1024);
  EXPECT_THROW(loss.backward(), c10::OutOfMemoryError);
  set_memory_budget(0);
}

// Peak memory of `updates` windows of `accumulation` micro-steps of `micro` samples.
int64_t training_peak(const std::string& name, int64_t micro, int64_t accumulation) {
  torch::manual_seed(0);
  auto model = make_model({.name = name, .hidden = {256, 128}});
  auto optimizer = make_optimizer({}, model->parameters());
  LocalReducer reducer;
  AccumulationEngine engine(model, *optimizer, reducer, EngineOptions{});
  const auto data = random_images(micro);
  reset_peak_memory();
  const int64_t base = memory_counters().current_bytes;
  for (int update = 0; update < 2; ++update) {
    engine.begin_window(micro * accumulation, micro * accumulation);
    for (int64_t i = 0; i < accumulation; ++i) {
      engine.micro_step(data.inputs, data.targets,
                        i + 1 == accumulation ? AccumulationEngine::MicroStep::Last
                                              : AccumulationEngine::MicroStep::Accumulate);
    }
    engine.update(0.01);
  }
  return memory_counters().peak_bytes - base;
}

TEST_F(MemoryTest, PeakIsFlatInAccumulationStepsAndGrowsWithTheMicroBatch) {
  for (const char* name : {"mlp", "cnn"}) {
    // Accumulating: the window's gradients stay alive while the next backward computes its
    // own, so a second micro-step costs the largest gradient once — and no further step costs
    // anything: 2 and 16 steps peak alike.
    const int64_t two = training_peak(name, 32, 2);
    const int64_t sixteen = training_peak(name, 32, 16);
    EXPECT_NEAR(double(sixteen) / double(two), 1.0, 0.01)
        << name << ": " << two << " vs " << sixteen;
    const int64_t larger = training_peak(name, 512, 2);
    EXPECT_GT(larger, two + two / 4) << name;
  }
  // Where activations dominate (the cnn), even no accumulation at all peaks within a few per
  // cent of 16 steps.
  const int64_t one = training_peak("cnn", 32, 1);
  EXPECT_NEAR(double(training_peak("cnn", 32, 16)) / double(one), 1.0, 0.03);
}

TEST_F(MemoryTest, FitNeverReturnsASizeWhosePeakExceedsTheBudget) {
  const auto data = random_images(2048);
  FitOptions options;
  options.budget_bytes = 24 << 20;
  options.margin = 0.1;
  options.max_micro_batch = 2048;
  options.seconds_per_probe = 0.01;
  const FitResult fit = fit_micro_batch(
      [] {
        return make_model({.name = "mlp", .hidden = {512, 256}});
      },
      OptimizerSettings{}, data, options);
  ASSERT_GT(fit.max_micro_batch, 1);
  EXPECT_LT(fit.max_micro_batch, 2048);
  EXPECT_EQ(fit.usable_bytes, int64_t(0.9 * double(24 << 20)));
  bool saw_failure_above = false;
  for (const auto& row : fit.table) {
    if (row.fits) {
      EXPECT_LE(row.peak_bytes, fit.usable_bytes) << row.micro_batch;
      EXPECT_LE(row.micro_batch, fit.max_micro_batch);
      EXPECT_GT(row.samples_per_s, 0);
    } else {
      EXPECT_GT(row.micro_batch, fit.max_micro_batch);
      saw_failure_above = true;
    }
  }
  EXPECT_TRUE(saw_failure_above);
  EXPECT_GE(fit.fastest_micro_batch, 1);
  EXPECT_LE(fit.fastest_micro_batch, fit.max_micro_batch);
  // The budget the caller had is back in force.
  EXPECT_EQ(memory_counters().budget_bytes, 0);

  // A budget smaller than the model itself fits nothing, and says so.
  options.budget_bytes = 1 << 20;
  const FitResult none = fit_micro_batch(
      [] {
        return make_model({.name = "mlp", .hidden = {512, 256}});
      },
      OptimizerSettings{}, data, options);
  EXPECT_EQ(none.max_micro_batch, 0);
  EXPECT_EQ(none.fastest_micro_batch, 0);
}

// A micro-batch of token rows costs rows x its longest row, so fit must probe the longest rows:
// a corpus of short rows with one long row last fits exactly what a corpus of long rows fits
// (probing the first rows, it would promise sizes a window holding the long row exceeds).
TensorDataset constant_token_rows(int64_t rows, int64_t seq_len, bool one_long_row_last) {
  UntrackedAllocations host_data;
  TokenDocuments documents;
  for (int64_t i = 0; i < rows; ++i) {
    const bool long_row = !one_long_row_last || i == rows - 1;
    documents.add(std::vector<int32_t>(size_t(long_row ? seq_len + 1 : 9), 7));
  }
  return token_dataset(document_rows(documents, seq_len, 0));
}

TEST_F(MemoryTest, FitProbesTokenRowsAtTheLongestRow) {
  constexpr int64_t kSeqLen = 96;
  const TensorDataset mixed_rows = constant_token_rows(256, kSeqLen, /*one_long_row_last=*/true);
  const TensorDataset long_rows = constant_token_rows(256, kSeqLen, false);
  ASSERT_EQ(mixed_rows.lengths.front(), 8);
  ASSERT_EQ(mixed_rows.lengths.back(), kSeqLen);
  GptOptions gpt;
  gpt.vocab = kByteVocabulary;
  gpt.seq_len = kSeqLen;
  gpt.layers = 1;
  gpt.d_model = 32;
  gpt.heads = 2;
  FitOptions options;
  options.budget_bytes = 12 << 20;
  options.max_micro_batch = 256;
  options.measure_speed = false;
  auto fit = [&](const TensorDataset& data) {
    return fit_micro_batch([&] { return make_gpt(gpt); }, OptimizerSettings{}, data, options);
  };
  const FitResult on_mixed = fit(mixed_rows);
  const FitResult on_long = fit(long_rows);
  ASSERT_GT(on_long.max_micro_batch, 1);
  ASSERT_LT(on_long.max_micro_batch, 256);
  EXPECT_EQ(on_mixed.max_micro_batch, on_long.max_micro_batch);
  EXPECT_EQ(on_mixed.probe_row_tokens, kSeqLen);
  EXPECT_EQ(on_long.probe_row_tokens, kSeqLen);
  // Images are their own shape: no row length to speak of.
  EXPECT_EQ(fit_micro_batch([] { return make_model({.name = "mlp", .hidden = {32}}); },
                            OptimizerSettings{}, random_images(64), options)
                .probe_row_tokens,
            0);
}

}  // namespace
}  // namespace bigbatch
