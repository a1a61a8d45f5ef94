// What bigbatch's accumulation engine costs over the minimal loop, measured in one process:
// blocks of updates of the hand-written loop (bench/peers/handwritten_loop.cpp's: loss / accum;
// backward; step every accum; index_select gathers) and of AccumulationEngine with its
// BatchAssembler (sum-reduced losses, the window's loss and accuracy totals, the noise-scale
// reading, the gradient norm, fused accumulation and the fused SGD step) alternate on twin
// models, the same data and the same threads, so the machine's drift and the CPU settings
// (denormals flushed) hit both alike. Separate
// processes, as bench/peer_bench.py runs them, cannot resolve differences of a few percent on
// this noisy machine; alternating blocks in one process can. The trainer's work between updates
// (metrics, progress) is not in it: peer_bench.py measures the CLI end to end.
// Prints one JSON object. Benchmarks only; never part of the product.
//
//   engine_overhead --model mlp --micro 16 --accum 8 --threads 1 --rounds 20 --block 20
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "config/train_config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "device/resources.h"
#include "dist/gradient_reducer.h"
#include "models/accumulating_linear.h"
#include "models/models.h"
#include "optim/fused_sgd.h"
#include "session/session.h"
#include "train/accumulation_engine.h"
#include "train/run_setup.h"
#include "train/train_step.h"

namespace {

using bench::median;
using bench::now;

torch::nn::Sequential twin(const std::string& name) {
  torch::manual_seed(0);
  return bigbatch::make_model({.name = name});
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp";
  int64_t micro = 16, accum = 8, threads = 1, rounds = 20, block = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--model")
      model = value;
    else if (flag == "--micro")
      micro = std::stoll(value);
    else if (flag == "--accum")
      accum = std::stoll(value);
    else if (flag == "--threads")
      threads = std::stoll(value);
    else if (flag == "--rounds")
      rounds = std::stoll(value);
    else if (flag == "--block")
      block = std::stoll(value);
  }
  bigbatch::TrainConfig config;
  config.model = model;
  bigbatch::configure_cpu(config, threads);
  const bigbatch::TensorDataset data = bigbatch::load_data_outside_budget(config).train;
  const std::vector<int64_t> order =
      bigbatch::epoch_order(42, 0, data.size(), bigbatch::Shuffle::On);
  const torch::Tensor order_tensor = torch::tensor(order, torch::kInt64);
  const int64_t window_items = micro * accum;
  const int64_t windows_per_epoch = data.size() / window_items;

  // The hand-written loop, with libtorch's own Linear arithmetic.
  auto plain_model = twin(model);
  bigbatch::set_gradient_accumulation_fusion(*plain_model, false);
  plain_model->train();
  torch::optim::SGD plain_optimizer(plain_model->parameters(),
                                    torch::optim::SGDOptions(0.05).momentum(0.9));
  int64_t plain_window = 0;
  auto plain_update = [&] {
    int64_t position = (plain_window++ % windows_per_epoch) * window_items;
    for (int64_t k = 0; k < accum; ++k, position += micro) {
      const auto index = order_tensor.narrow(0, position, micro);
      auto loss = torch::nn::functional::cross_entropy(
                      plain_model->forward(data.inputs.index_select(0, index)),
                      data.targets.index_select(0, index)) /
                  static_cast<double>(accum);
      loss.backward();
    }
    plain_optimizer.step();
    plain_optimizer.zero_grad();
  };

  // bigbatch's engine, as the trainer drives it.
  auto engine_model = twin(model);
  engine_model->train();
  // What the trainer builds: libtorch's SGD updated in one pass per parameter.
  bigbatch::FusedSgd engine_optimizer(engine_model->parameters(),
                                      torch::optim::SGDOptions(0.05).momentum(0.9));
  bigbatch::LocalReducer reducer;
  bigbatch::AccumulationEngine engine(engine_model, engine_optimizer, reducer, {});
  bigbatch::BatchAssembler assembler(data, micro);
  bigbatch::UpdateWindow window;
  window.size = window.rank_size = window_items;
  window.micro_batch_sizes.assign(static_cast<size_t>(accum), micro);
  int64_t engine_window = 0;
  auto engine_update = [&] {
    window.begin = window.rank_begin = (engine_window++ % windows_per_epoch) * window_items;
    bigbatch::train_window(engine, assembler, order, window, 0.05);
  };

  for (int i = 0; i < 3; ++i) {
    plain_update();
    engine_update();
  }
  std::vector<double> plain_seconds, engine_seconds;  // per update, one value per block
  for (int64_t r = 0; r < rounds; ++r) {
    // Which goes first alternates, so neither always follows the other's cache state.
    for (int turn = 0; turn < 2; ++turn) {
      const bool plain_turn = (turn == 0) == (r % 2 == 0);
      const double start = now();
      for (int64_t i = 0; i < block; ++i)
        plain_turn ? plain_update() : engine_update();
      (plain_turn ? plain_seconds : engine_seconds).push_back((now() - start) / double(block));
    }
  }
  const double plain = median(plain_seconds);
  const double engine_time = median(engine_seconds);
  std::vector<double> ratios;  // per round, engine speed over plain speed
  for (size_t i = 0; i < plain_seconds.size(); ++i)
    ratios.push_back(plain_seconds[i] / engine_seconds[i]);
  std::printf(
      "{\"model\": \"%s\", \"micro\": %lld, \"accum\": %lld, \"threads\": %lld, "
      "\"handwritten_update_us\": %.1f, \"engine_update_us\": %.1f, "
      "\"engine_speed_ratio\": %.4f, \"ratio_min\": %.4f, \"ratio_max\": %.4f, "
      "\"overhead_per_micro_step_us\": %.2f}\n",
      model.c_str(), static_cast<long long>(micro), static_cast<long long>(accum),
      static_cast<long long>(threads), plain * 1e6, engine_time * 1e6, median(ratios),
      *std::min_element(ratios.begin(), ratios.end()),
      *std::max_element(ratios.begin(), ratios.end()), (engine_time - plain) * 1e6 / double(accum));
  return 0;
}
