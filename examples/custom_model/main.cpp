// Trains a network of one's own on data of one's own with bigbatch's engine: two spirals of
// points to tell apart, a small residual MLP written as a torch::nn::Module. The global batch
// is what the mathematics sees; the micro-batch (argv[2]) only what memory holds at once, so
// runs with different micro-batches end at the same weights.
//
//   custom_model RUN_DIR [MICRO_BATCH [EPOCHS]]
#include <bigbatch/bigbatch.h>

#include <cmath>
#include <cstdio>
#include <string>

// Cloneable, so that bigbatch can copy it (thread tuning, memory fitting).
struct ResidualMlpImpl : torch::nn::Cloneable<ResidualMlpImpl> {
  ResidualMlpImpl() { reset(); }
  void reset() override {
    input = register_module("input", torch::nn::Linear(2, 64));
    hidden = register_module("hidden", torch::nn::Linear(64, 64));
    output = register_module("output", torch::nn::Linear(64, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::tanh(input->forward(x));
    h = h + torch::tanh(hidden->forward(h));  // a residual block
    return output->forward(h);
  }
  torch::nn::Linear input{nullptr}, hidden{nullptr}, output{nullptr};
};
TORCH_MODULE(ResidualMlp);

// Two interleaved spirals, `n` points each, labelled 0 and 1.
bigbatch::TensorDataset spirals(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  const auto t = torch::rand({n}) * 3 * M_PI + 0.5;
  std::vector<torch::Tensor> points, labels;
  for (int64_t arm = 0; arm < 2; ++arm) {
    const double turn = arm * M_PI;
    points.push_back(torch::stack({t * torch::cos(t + turn), t * torch::sin(t + turn)}, 1) / 10 +
                     0.02 * torch::randn({n, 2}));
    labels.push_back(torch::full({n}, arm, torch::kInt64));
  }
  bigbatch::TensorDataset data;
  data.inputs = torch::cat(points);
  data.targets = torch::cat(labels);
  data.classes = 2;
  return data;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: custom_model RUN_DIR [MICRO_BATCH [EPOCHS]]\n");
    return 2;
  }
  bigbatch::TrainConfig config;
  config.model = "cpp:residual-mlp";
  config.dataset = "cpp:spirals";
  config.out = argv[1];
  config.global_batch = 128;
  config.micro_batch = argc > 2 ? std::stoll(argv[2]) : 32;
  config.optimizer = bigbatch::OptimizerKind::AdamW;
  config.lr = 2e-2;
  config.warmup = bigbatch::Interval::updates(10);
  config.epochs = argc > 3 ? std::stoll(argv[3]) : 40;
  config.threads = 1;
  config.progress = bigbatch::ProgressMode::Off;

  bigbatch::CustomProblem problem;
  problem.make_model = [] { return torch::nn::Sequential(ResidualMlp()); };
  problem.data.train = spirals(1000, 1);
  problem.data.test = spirals(250, 2);
  try {
    const bigbatch::TrainResult result = bigbatch::train(config, problem);
    std::printf("custom_model: %lld updates, test accuracy %.2f%%, run directory %s\n",
                static_cast<long long>(result.updates), 100 * result.test_accuracy,
                result.run_dir.c_str());
  } catch (const bigbatch::Error& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 2;
  }
  return 0;
}
