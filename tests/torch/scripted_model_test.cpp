// TorchScript modules written in PyTorch (tests/python/make_scripted_models.py makes them with
// the system's python3-torch) trained by the engine: their state under the state_dict names,
// a tied weight as one parameter, deep clones, frozen BatchNorm, and the specification itself —
// micro-batches of the same global batch end at the same weights as one batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "batching/batch_plan.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/text_corpus.h"
#include "dist/gradient_reducer.h"
#include "io/safetensors.h"
#include "models/models.h"
#include "models/scripted_model.h"
#include "optim/optimizer.h"
#include "train/accumulation_engine.h"
#include "train/train_step.h"
#include "weight_difference.h"

namespace bigbatch {
namespace {

// The modules, written once per test process into a fresh directory.
std::string scripted(const std::string& name) {
  static const std::string directory = [] {
    char pattern[] = "/tmp/bigbatch-scripted-XXXXXX";
    const char* made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    const std::string dir = made ? made : "/tmp";
    // Debian's python3-torch; BIGBATCH_PYTHON names another (a GPU machine's, bench/gpu_check.sh).
    const char* python = std::getenv("BIGBATCH_PYTHON");
    const std::string command = std::string(python ? python : "/usr/bin/python3") + " " +
                                BIGBATCH_SOURCE_DIR + "/tests/python/make_scripted_models.py " +
                                dir;
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return dir;
  }();
  return directory + "/" + name;
}

torch::nn::Sequential load(const std::string& name) {
  return torch::nn::Sequential(
      std::shared_ptr<torch::nn::SequentialImpl>(load_scripted_model(scripted(name))));
}

std::vector<std::string> names_of(const NamedTensors& state) {
  std::vector<std::string> names;
  for (const auto& item : state)
    names.push_back(item.first);
  return names;
}

TEST(ScriptedModel, StateCarriesTheStateDictNames) {
  auto mlp = load("mlp.pt");  // a scripted nn.Sequential: its own layers are "1" and "3"
  EXPECT_EQ(names_of(model_state(*mlp)),
            (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"}));
  const auto logits = mlp->forward(torch::zeros({5, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{5, 10}));
}

TEST(ScriptedModel, ATiedWeightIsOneParameterUnderBothNames) {
  auto lm = load("tiny_lm.pt");
  auto* scripted_lm = as_scripted(*lm);
  ASSERT_NE(scripted_lm, nullptr);
  // head.weight = token.weight: Python's parameters() has 12 tensors, libtorch's list 13.
  EXPECT_EQ(lm->parameters().size(), 12u);
  ASSERT_EQ(scripted_lm->aliases().size(), 1u);
  EXPECT_EQ(scripted_lm->aliases()[0].first, "head.weight");
  EXPECT_EQ(scripted_lm->aliases()[0].second, "token.weight");
  const auto state = model_state(*lm);
  const auto names = names_of(state);
  EXPECT_NE(std::find(names.begin(), names.end(), "head.weight"), names.end());
  torch::Tensor token, head;
  for (const auto& [name, tensor] : state) {
    if (name == "token.weight")
      token = tensor;
    if (name == "head.weight")
      head = tensor;
  }
  EXPECT_TRUE(token.is_same(head));
}

TEST(ScriptedModel, ClonesAreDeepAndKeepTiesAndFrozenBatchNorm) {
  auto lm = load("tiny_lm.pt");
  auto copy = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(lm->clone());
  ASSERT_NE(as_scripted(*copy), nullptr);
  EXPECT_EQ(copy->parameters().size(), 12u);
  const auto before = copy->parameters()[0].clone();
  {
    torch::NoGradGuard no_grad;
    lm->parameters()[0].add_(1.0);
  }
  EXPECT_TRUE(torch::equal(copy->parameters()[0], before));

  auto cnn = load("cnn_bn.pt");
  cnn->train();
  EXPECT_EQ(batch_statistics_layers(*cnn), (std::vector<std::string>{"bn"}));
  apply_batch_norm_mode(*cnn, BatchNormMode::Frozen);
  EXPECT_TRUE(batch_statistics_layers(*cnn).empty());
  cnn->eval();
  cnn->train();  // as after an evaluation: frozen stays frozen
  EXPECT_TRUE(batch_statistics_layers(*cnn).empty());
  auto cnn_copy = cnn->clone();
  EXPECT_TRUE(batch_statistics_layers(*cnn_copy).empty());
}

TEST(ScriptedModel, BrokenModulesAreOneLineModelErrors) {
  auto message_of = [](const std::string& name) {
    try {
      auto model = load(name);
      model->forward(torch::zeros({2, 1, 28, 28}));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Model);
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("not_torchscript.pt").find("is not a TorchScript module"),
            std::string::npos);
  EXPECT_NE(message_of("wrong_arguments.pt").find("forward() takes (x, y, z)"), std::string::npos);
  EXPECT_NE(message_of("throws.pt").find("RuntimeError: this module refuses every batch"),
            std::string::npos);
  EXPECT_NE(message_of("returns_tuple.pt").find("returned Tuple"), std::string::npos);
  EXPECT_NE(message_of("missing.pt").find("does not exist"), std::string::npos);
}

std::vector<torch::Tensor> weights_of(torch::nn::Module& model) {
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.named_parameters()) {
    torch::Tensor w = p.value().detach().to(torch::kFloat64).clone();
    if (p.key().size() >= 17 &&
        p.key().compare(p.key().size() - 17, 17, "attn.in_proj_bias") == 0) {
      // The key bias adds q.b_k to all of a query's scores alike, which softmax cancels: its
      // exact gradient is zero, and AdamW divides the rounding noise by its own size, so two
      // exact orders of summation walk it apart (tests/python/gpt_oracle.py). Compare the
      // query and value biases.
      const int64_t d = w.size(0) / 3;
      w = torch::cat({w.narrow(0, 0, d), w.narrow(0, 2 * d, d)});
    }
    weights.push_back(w);
  }
  return weights;
}

// Two epochs of AdamW with clipping through the real sampler, plan and engine, the global batch
// 24 cut into micro-batches of `micro` (the last window short: 100 = 4 x 24 + 4).
std::vector<torch::Tensor> train_scripted(const std::string& name, const TensorDataset& data,
                                          int64_t micro, torch::Dtype dtype) {
  auto model = load(name);
  model->to(dtype);
  model->train();
  OptimizerSettings settings;
  settings.kind = OptimizerKind::AdamW;
  settings.weight_decay = 0.01;
  auto optimizer = make_optimizer(settings, model->parameters());
  LocalReducer reducer;
  EngineOptions options;
  options.clip_norm = 0.5;
  AccumulationEngine engine(model, *optimizer, reducer, options);
  BatchRequest request;
  request.global_batch_size = 24;
  request.micro_batch_size = micro;
  const BatchPlan plan = BatchPlan::resolve(request);
  const EpochPlan epoch_plan = plan_epoch(plan, data.size(), LastWindow::Keep);
  BatchAssembler assembler(data, plan.micro_batch_size);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto order = epoch_order(3, epoch, data.size(), Shuffle::On);
    for (int64_t u = 0; u < epoch_plan.updates_per_epoch; ++u)
      train_window(engine, assembler, order, window_for_update(plan, epoch_plan, u, 0), 3e-3);
  }
  return weights_of(*model);
}

TensorDataset images(int64_t n, torch::Dtype dtype) {
  torch::manual_seed(5);
  TensorDataset data;
  data.inputs = torch::randn({n, 1, 28, 28}).to(dtype);
  data.targets = torch::randint(0, 10, {n}, torch::kInt64);
  return data;
}

TensorDataset documents(int64_t n) {
  std::mt19937 random(11);
  std::uniform_int_distribution<int> length(1, 60), byte('a', 'z');
  std::vector<std::string> texts;
  for (int64_t i = 0; i < n; ++i) {
    std::string text(size_t(length(random)), ' ');
    for (char& c : text)
      c = char(byte(random));
    texts.push_back(text);
  }
  return token_dataset(document_rows(texts, /*seq_len=*/48));
}

TEST(ScriptedEquivalence, MicroBatchesEqualOneBatchInFloat64) {
  const TensorDataset data = images(100, torch::kFloat64);
  const auto whole = train_scripted("mlp.pt", data, 24, torch::kFloat64);
  const auto micro = train_scripted("mlp.pt", data, 5, torch::kFloat64);  // 5+5+5+5+4
  const double diff = max_relative_difference(micro, whole);
  std::printf("[ scripted mlp float64 ] 10 AdamW updates, 5 x 5 vs 24 x 1: %.3g\n", diff);
  EXPECT_LT(diff, 1e-12);
  EXPECT_GT(max_relative_difference(whole, weights_of(*load("mlp.pt"))), 1e-3);  // it trained
}

TEST(ScriptedEquivalence, MicroBatchesEqualOneBatchInFloat32) {
  const TensorDataset data = images(100, torch::kFloat32);
  const double diff = max_relative_difference(train_scripted("mlp.pt", data, 4, torch::kFloat32),
                                              train_scripted("mlp.pt", data, 24, torch::kFloat32));
  std::printf("[ scripted mlp float32 ] 4 x 6 vs 24 x 1: %.3g\n", diff);
  EXPECT_LT(diff, 1e-5);
}

TEST(ScriptedEquivalence, TiedLanguageModelOnVariableLengthDocumentsInFloat64) {
  // The mean over tokens: documents of 1 to 60 bytes, padded per micro-batch.
  const TensorDataset data = documents(100);
  const auto whole = train_scripted("tiny_lm.pt", data, 24, torch::kFloat64);
  const auto micro = train_scripted("tiny_lm.pt", data, 4, torch::kFloat64);
  const double diff = max_relative_difference(micro, whole);
  std::printf("[ scripted tied lm float64 ] 10 AdamW updates, 4 x 6 vs 24 x 1: %.3g\n", diff);
  EXPECT_LT(diff, 1e-12);
}

}  // namespace
}  // namespace bigbatch
namespace bigbatch {
namespace {
// libtorch's deepcopy() alone would make the copy's parameters non-leaf views of the
// original's through autograd: the thread-count probe trained the real model (it diverged).
TEST(ScriptedModel, TrainingACloneLeavesTheOriginalAlone) {
  auto model = load("mlp.pt");
  const auto before = weights_of(*model);
  auto copy = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
  copy->train();
  const auto x = torch::randn({4, 1, 28, 28});
  copy->forward(x).sum().backward();
  for (const auto& p : model->parameters())
    EXPECT_FALSE(p.grad().defined());
  for (const auto& p : copy->parameters())
    EXPECT_TRUE(p.grad().defined());
  EXPECT_EQ(max_relative_difference(weights_of(*model), before), 0.0);
}
}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

// forward(inputs, targets) -> (loss_sum, item_count): the engine takes the module's count and
// divides once after the reduction, so the update is still the mean over the whole window.
TEST(ScriptedOwnLoss, EqualsTheSameNetworkWhoseLossBigbatchComputes) {
  const TensorDataset data = images(100, torch::kFloat64);
  const auto own = train_scripted("own_loss_mlp.pt", data, 5, torch::kFloat64);
  const auto logits = train_scripted("mlp.pt", data, 24, torch::kFloat64);
  const double diff = max_relative_difference(own, logits);
  std::printf("[ own loss float64 ] 5 x 5 with the module's loss vs 24 x 1 with bigbatch's: %.3g\n",
              diff);
  EXPECT_LT(diff, 1e-12);
}

TEST(ScriptedOwnLoss, MicroBatchesEqualOneBatchForACustomLossAndPerTokenCounts) {
  const TensorDataset data = images(100, torch::kFloat64);
  const double smoothed =
      max_relative_difference(train_scripted("smoothed_mlp.pt", data, 4, torch::kFloat64),
                              train_scripted("smoothed_mlp.pt", data, 24, torch::kFloat64));
  const TensorDataset text = documents(100);
  const double tokens =
      max_relative_difference(train_scripted("own_loss_lm.pt", text, 4, torch::kFloat64),
                              train_scripted("own_loss_lm.pt", text, 24, torch::kFloat64));
  std::printf("[ own loss float64 ] label smoothing 4 x 6 vs 24 x 1: %.3g; tokens: %.3g\n",
              smoothed, tokens);
  EXPECT_LT(smoothed, 1e-12);
  EXPECT_LT(tokens, 1e-12);
}

TEST(ScriptedOwnLoss, AMeanOrAnotherResultIsRefusedWithTheReason) {
  auto message_of = [](const std::string& name) {
    try {
      auto model = load(name);
      as_scripted(*model)->forward_loss(torch::zeros({2, 1, 28, 28}),
                                        torch::zeros({2}, torch::kInt64));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Model);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("mean_loss.pt").find("cannot be made the mean over the whole update"),
            std::string::npos);
  EXPECT_NE(message_of("three_results.pt").find("not (loss_sum, item_count)"), std::string::npos);
  auto own = load("own_loss_mlp.pt");
  EXPECT_TRUE(computes_own_loss(*own));
  EXPECT_THROW(own->forward(torch::zeros({2, 1, 28, 28})), Error);
}

}  // namespace
}  // namespace bigbatch
