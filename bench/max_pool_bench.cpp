// MaxPool2x2 (models/max_pool_2x2.h) against libtorch's max_pool2d(x, 2): forward plus backward
// at the cnn's pooling shapes, both alternating in blocks in one process (this machine's
// run-to-run noise is larger than many differences); prints the medians and the median of the
// per-round speed ratios. Benchmarks only; never part of the product.
//
//   max_pool_bench [--threads 1] [--rounds 20]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "models/max_pool_2x2.h"

using bench::median;
using bench::now;

int main(int argc, char** argv) {
  int threads = 1, rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads")
      threads = std::stoi(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = std::stoi(argv[i + 1]);
  }
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  // The cnn's two poolings (after conv 1 and conv 2) at micro-batches 16, 64 and 256.
  for (const int64_t batch : {16, 64, 256}) {
    for (const auto& plane : std::vector<std::vector<int64_t>>{{32, 26, 26}, {64, 11, 11}}) {
      // ReLU outputs, as in the model: many windows of equal zeros.
      const auto x =
          torch::relu(torch::randn({batch, plane[0], plane[1], plane[2]})).set_requires_grad(true);
      const int per_block = static_cast<int>(std::max<int64_t>(1, 256 / batch));
      std::vector<double> theirs, ours, ratios;
      for (int round = 0; round < rounds + 2; ++round) {
        double seconds[2];
        for (int which = 0; which < 2; ++which) {
          const double start = now();
          for (int k = 0; k < per_block; ++k) {
            auto y = which == 0 ? torch::max_pool2d(x, 2) : bigbatch::max_pool_2x2(x);
            y.backward(torch::ones_like(y));
          }
          seconds[which] = (now() - start) / per_block;
        }
        if (round < 2)
          continue;  // warm-up
        theirs.push_back(seconds[0]);
        ours.push_back(seconds[1]);
        ratios.push_back(seconds[0] / seconds[1]);
      }
      std::printf(
          "{\"input\": \"%lldx%lldx%lldx%lld\", \"threads\": %d, \"libtorch_us\": %.1f, "
          "\"max_pool_2x2_us\": %.1f, \"speed_up\": %.2f, \"speed_up_min\": %.2f, "
          "\"speed_up_max\": %.2f}\n",
          static_cast<long long>(batch), static_cast<long long>(plane[0]),
          static_cast<long long>(plane[1]), static_cast<long long>(plane[2]), threads,
          1e6 * median(theirs), 1e6 * median(ours), median(ratios),
          *std::min_element(ratios.begin(), ratios.end()),
          *std::max_element(ratios.begin(), ratios.end()));
    }
  }
  return 0;
}
