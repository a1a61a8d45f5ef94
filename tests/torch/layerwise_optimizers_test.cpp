// LARS and LAMB against single steps computed by hand from the papers' formulas
// (../shared/LARGE_BATCH.md, 5), their fallbacks and exclusions, and their state surviving
// a save and load.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "optim/layerwise_optimizers.h"
#include "optim/optimizer.h"

namespace bigbatch {
namespace {

torch::Tensor param(std::vector<float> values, std::vector<int64_t> shape) {
  return torch::tensor(values, torch::kFloat64).reshape(shape).set_requires_grad(true);
}

TEST(Lars, OneStepMatchesTheFormula) {
  // w = [[3, 4]] (||w|| 5), g = [[0.6, 0.8]] (||g|| 1), wd 0.01, eta 0.001, lr 0.1.
  auto w = param({3, 4}, {1, 2});
  w.mutable_grad() = torch::tensor({0.6, 0.8}, torch::kFloat64).reshape({1, 2});
  Lars lars({w}, LarsOptions(0.1).momentum(0.9).weight_decay(0.01).trust_coefficient(0.001));
  lars.step();
  const double local = 0.001 * 5 / (1 + 0.01 * 5);
  const double expected0 = 3 - 0.1 * local * (0.6 + 0.01 * 3);
  const double expected1 = 4 - 0.1 * local * (0.8 + 0.01 * 4);
  EXPECT_NEAR(w[0][0].item<double>(), expected0, 1e-12);
  EXPECT_NEAR(w[0][1].item<double>(), expected1, 1e-12);
  // Second step: momentum carries the first step's scaled direction.
  w.mutable_grad() = torch::tensor({0.6, 0.8}, torch::kFloat64).reshape({1, 2});
  const double w0 = w[0][0].item<double>(), w1 = w[0][1].item<double>();
  lars.step();
  const double norm = std::sqrt(w0 * w0 + w1 * w1);
  const double local2 = 0.001 * norm / (1 + 0.01 * norm);
  const double v0 = 0.9 * local * (0.6 + 0.03) + local2 * (0.6 + 0.01 * w0);
  EXPECT_NEAR(w[0][0].item<double>(), w0 - 0.1 * v0, 1e-12);
}

TEST(Lars, ZeroWeightsAndBiasesFallBack) {
  auto zero = param({0, 0}, {1, 2});
  zero.mutable_grad() = torch::tensor({1.0, 2.0}, torch::kFloat64).reshape({1, 2});
  auto bias = param({1, 1}, {2});
  bias.mutable_grad() = torch::tensor({1.0, 2.0}, torch::kFloat64);
  Lars lars({zero, bias}, LarsOptions(0.1).momentum(0).weight_decay(0.5).trust_coefficient(0.001));
  lars.step();
  // Zero weights: trust ratio 1, so the local rate is eta.
  EXPECT_NEAR(zero[0][1].item<double>(), -0.1 * 0.001 * 2.0, 1e-15);
  // A bias: plain SGD, no weight decay.
  EXPECT_NEAR(bias[1].item<double>(), 1 - 0.1 * 2.0, 1e-15);
}

TEST(Lamb, OneStepMatchesTheFormula) {
  // First step: bias-corrected moments are g and g^2, so r = g / (|g| + eps).
  auto w = param({3, 4}, {1, 2});
  w.mutable_grad() = torch::tensor({0.5, -2.0}, torch::kFloat64).reshape({1, 2});
  Lamb lamb({w}, LambOptions(0.01).beta1(0.9).beta2(0.999).eps(1e-6).weight_decay(0.1));
  lamb.step();
  const double r0 = 0.5 / (0.5 + 1e-6), r1 = -2.0 / (2.0 + 1e-6);
  const double u0 = r0 + 0.1 * 3, u1 = r1 + 0.1 * 4;
  const double ratio = 5 / std::sqrt(u0 * u0 + u1 * u1);
  EXPECT_NEAR(w[0][0].item<double>(), 3 - 0.01 * ratio * u0, 1e-12);
  EXPECT_NEAR(w[0][1].item<double>(), 4 - 0.01 * ratio * u1, 1e-12);
  EXPECT_DOUBLE_EQ(trust_ratio(0, 3), 1);
  EXPECT_DOUBLE_EQ(trust_ratio(3, 0), 1);
  EXPECT_DOUBLE_EQ(trust_ratio(3, 6), 0.5);
}

TEST(LayerwiseOptimizers, StateSurvivesSaveAndLoadAndTheRateCanBeSet) {
  for (const auto kind : {OptimizerKind::Lars, OptimizerKind::Lamb}) {
    OptimizerSettings settings;
    settings.kind = kind;
    settings.weight_decay = 0.01;
    torch::manual_seed(0);
    auto a = torch::randn({4, 3}, torch::requires_grad());
    auto b = a.detach().clone().set_requires_grad(true);
    auto first = make_optimizer(settings, {a});
    auto grads = std::vector<torch::Tensor>{torch::randn({4, 3}), torch::randn({4, 3})};
    // a: two steps with one optimizer.
    for (const auto& g : grads) {
      a.mutable_grad() = g.clone();
      set_learning_rate(*first, 0.05);
      first->step();
    }
    // b: one step, save, load into a fresh optimizer, the second step.
    auto before = make_optimizer(settings, {b});
    b.mutable_grad() = grads[0].clone();
    set_learning_rate(*before, 0.05);
    before->step();
    std::ostringstream bytes;
    {
      torch::serialize::OutputArchive archive;
      before->save(archive);
      archive.save_to(bytes);
    }
    auto after = make_optimizer(settings, {b});
    std::istringstream in(bytes.str());
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    after->load(archive);
    b.mutable_grad() = grads[1].clone();
    set_learning_rate(*after, 0.05);
    after->step();
    EXPECT_TRUE(torch::equal(a, b)) << to_string(kind);
  }
}

}  // namespace
}  // namespace bigbatch
