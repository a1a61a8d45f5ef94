// --precision bf16: the forward pass runs in bfloat16, while weights, loss, gradients and
// their accumulation stay fp32, and accumulation still equals one batch (to bf16's precision).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <mutex>
#include <set>
#include <vector>

#include "device/precision.h"
#include "device/resources.h"
#include "dist/gradient_reducer.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "train/accumulation_engine.h"
#include "train/run_setup.h"

namespace bigbatch {
namespace {

std::vector<torch::Tensor> window_gradients(const std::string& name, Precision precision,
                                            int64_t micro, const torch::Tensor& inputs,
                                            const torch::Tensor& targets, double* loss) {
  torch::manual_seed(7);
  auto model = make_model({.name = name, .hidden = {64, 32}});
  auto optimizer = make_optimizer({}, model->parameters());
  LocalReducer reducer;
  EngineOptions options;
  options.precision = precision;
  AccumulationEngine engine(model, *optimizer, reducer, options);
  const int64_t n = inputs.size(0);
  engine.begin_window(n, n);
  for (int64_t begin = 0; begin < n; begin += micro) {
    engine.micro_step(inputs.slice(0, begin, begin + micro), targets.slice(0, begin, begin + micro),
                      begin + micro >= n ? AccumulationEngine::MicroStep::Last
                                         : AccumulationEngine::MicroStep::Accumulate);
  }
  *loss = engine.finish_gradients().loss();
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat32);         // master weights
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32);  // accumulation buffers
    grads.push_back(p.grad().clone());
  }
  return grads;
}

double relative(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, ((a[i] - b[i]).norm() / b[i].norm()).item<double>());
  return worst;
}

TEST(Precision, Bf16KeepsFp32GradientsAndAccumulatesExactlyEnough) {
  torch::manual_seed(3);
  const auto inputs = torch::randn({128, 1, 28, 28});
  const auto targets = torch::randint(0, 10, {128}, torch::kInt64);
  for (const char* name : {"mlp", "cnn"}) {
    double loss_fp32 = 0, loss_bf16 = 0, loss_bf16_whole = 0;
    const auto fp32 = window_gradients(name, Precision::Fp32, 16, inputs, targets, &loss_fp32);
    const auto bf16 = window_gradients(name, Precision::Bf16, 16, inputs, targets, &loss_bf16);
    const auto bf16_whole =
        window_gradients(name, Precision::Bf16, 128, inputs, targets, &loss_bf16_whole);
    // bf16 has 8 significant bits: on these random-label gradients (mostly noise) the worst
    // tensor is 7% (mlp) / 12% (cnn) from fp32 on CPUs with AVX-512, and 22% for the cnn on
    // an AVX2-only CPU (no bf16 instructions: its convolutions take other kernels) — but any
    // micro-batch gives the same bf16 result to 2%: accumulation adds nothing to bf16's own
    // error.
    EXPECT_LT(relative(bf16, fp32), 0.35) << name;
    EXPECT_NEAR(loss_bf16, loss_fp32, 0.02 * loss_fp32) << name;
    EXPECT_LT(relative(bf16, bf16_whole), 0.02) << name;
    EXPECT_GT(relative(bf16, fp32), 0.0) << name;  // bf16 really ran
  }
  // The scope restored the state (libtorch 2.4 keyed autocast's switches by device type).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
#else
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
#endif
}

TEST(Precision, Names) {
  EXPECT_EQ(precision_names().parse("bf16"), Precision::Bf16);
  EXPECT_STREQ(to_string(Precision::Fp32), "fp32");
  EXPECT_THROW(precision_names().parse("fp8"), std::exception);
}

TEST(CpuSetup, DenormalsAreFlushedUnlessKept) {
  // 1e-30 x 1e-10 = 1e-40 is a denormal float: zero when flushed, kept otherwise.
  const auto product = [] {
    return (torch::tensor({1e-30f}) * torch::tensor({1e-10f})).item<float>();
  };
  TrainConfig config;
  config.keep_denormals = true;
  EXPECT_FALSE(configure_cpu(config, 1));
  EXPECT_GT(product(), 0.0f);
  config.keep_denormals = false;
  if (configure_cpu(config, 1)) {  // x86 with SSE: always, in practice
    EXPECT_EQ(product(), 0.0f);
    // Normal numbers are untouched.
    EXPECT_FLOAT_EQ((torch::tensor({1e-20f}) * torch::tensor({1e-10f})).item<float>(), 1e-30f);
  }
  config.keep_denormals = true;
  configure_cpu(config, 1);  // as the other tests expect
}

// The mode is per thread: configure_cpu() sets it on every intra-op thread through one
// parallel_for, which runs in parallel only where bigbatch's own code is compiled with
// libtorch's OpenMP (a build without it once left the workers with denormals on, and every
// parallel_for of bigbatch's — the attention kernel's heads among them — on one thread).
TEST(CpuSetup, EveryIntraOpThreadGetsTheDenormalMode) {
  TrainConfig config;
  config.keep_denormals = false;
  if (!configure_cpu(config, 2))
    GTEST_SKIP() << "no denormal control on this CPU";
  std::mutex mutex;
  std::set<int> threads;
  std::vector<float> products;
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    volatile float tiny = 1e-30f, small = 1e-10f;
    const float product = tiny * small;
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(at::get_thread_num());
    products.push_back(product);
  });
  EXPECT_EQ(threads.size(), 2u) << "at::parallel_for ran on one thread: not built with OpenMP?";
  for (float product : products)
    EXPECT_EQ(product, 0.0f);
  config.keep_denormals = true;
  configure_cpu(config, 1);  // as the other tests expect
}

}  // namespace
}  // namespace bigbatch
