// optim/fused_sgd.h: libtorch's SGD in one pass per parameter. Same trajectory as
// torch::optim::SGD over several steps in every combination of momentum, dampening, Nesterov
// and weight decay; libtorch's own path (bit for bit) for tensors the loop does not cover; the
// same checkpoint format in both directions.
#include "optim/fused_sgd.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <vector>

namespace bigbatch {
namespace {

std::vector<torch::Tensor> parameters(torch::ScalarType dtype = torch::kFloat32) {
  torch::manual_seed(1);
  // Large enough to be split across threads (the loop's grain is 32768 elements).
  return {torch::randn({300, 257}, dtype).set_requires_grad(true),
          torch::randn({257}, dtype).set_requires_grad(true)};
}

// Runs `steps` steps with the same gradients through both optimizers.
void expect_same_trajectory(const torch::optim::SGDOptions& options, int steps,
                            torch::ScalarType dtype, double tolerance) {
  auto fused_params = parameters(dtype);
  auto plain_params = parameters(dtype);
  FusedSgd fused(fused_params, options);
  torch::optim::SGD plain(plain_params, options);
  torch::manual_seed(2);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < fused_params.size(); ++i) {
      const auto g = torch::randn_like(fused_params[i]);
      fused_params[i].mutable_grad() = g.clone();
      plain_params[i].mutable_grad() = g.clone();
    }
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < fused_params.size(); ++i) {
    const double difference = (fused_params[i] - plain_params[i]).abs().max().item<double>();
    if (tolerance == 0) {
      EXPECT_TRUE(torch::equal(fused_params[i], plain_params[i])) << "parameter " << i;
    } else {
      EXPECT_LT(difference, tolerance) << "parameter " << i;
    }
  }
}

TEST(FusedSgd, FollowsLibtorchsSgdInEveryCombination) {
  for (double momentum : {0.0, 0.9}) {
    for (double dampening : {0.0, 0.1}) {
      for (bool nesterov : {false, true}) {
        for (double weight_decay : {0.0, 5e-4}) {
          if (nesterov && (momentum == 0 || dampening != 0))
            continue;  // libtorch refuses these
          SCOPED_TRACE(::testing::Message()
                       << "momentum " << momentum << " dampening " << dampening << " nesterov "
                       << nesterov << " weight decay " << weight_decay);
          const auto options = torch::optim::SGDOptions(0.05)
                                   .momentum(momentum)
                                   .dampening(dampening)
                                   .nesterov(nesterov)
                                   .weight_decay(weight_decay);
          expect_same_trajectory(options, 6, torch::kFloat32, 1e-5);
        }
      }
    }
  }
}

TEST(FusedSgd, TensorsTheLoopDoesNotCoverTakeLibtorchsOwnOperations) {
  const auto options =
      torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4);
  expect_same_trajectory(options, 4, torch::kFloat64, 0);  // bit for bit
}

TEST(FusedSgd, CheckpointsAreLibtorchsInBothDirections) {
  const auto options = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-4);
  auto params = parameters();
  FusedSgd fused(params, options);
  for (auto& p : params)
    p.mutable_grad() = torch::ones_like(p);
  fused.step();
  fused.step();
  std::stringstream stream;
  torch::serialize::OutputArchive out;
  fused.save(out);
  out.save_to(stream);

  auto restored_params = parameters();
  for (size_t i = 0; i < params.size(); ++i)
    restored_params[i].detach().copy_(params[i].detach());
  torch::optim::SGD plain(restored_params, options);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  plain.load(in);
  for (auto* optimizer : std::vector<torch::optim::Optimizer*>{&fused, &plain}) {
    for (auto& p : optimizer->param_groups()[0].params())
      p.mutable_grad() = torch::full_like(p, 0.5);
    optimizer->step();
  }
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_LT((params[i] - restored_params[i]).abs().max().item<double>(), 1e-6);
}

TEST(FusedSgd, BumpsTheParametersVersionLikeAnInPlaceOperation) {
  auto params = parameters();
  FusedSgd sgd(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  for (auto& p : params)
    p.mutable_grad() = torch::ones_like(p);
  sgd.step();  // creates the buffers
  const auto before = params[0]._version();
  sgd.step();  // the fused loop
  EXPECT_GT(params[0]._version(), before);
}

}  // namespace
}  // namespace bigbatch
