// The CPU causal-attention kernel (models/causal_attention.h) against the textbook composition
// (batched matmul, mask, softmax, matmul: what PyTorch's models compute): forward plus backward
// at the gpt's shapes, both alternating in one process (this machine's run-to-run noise is
// larger than many differences); prints the medians and the median of the per-round speed
// ratios. Benchmarks only; never part of the product.
//
//   attention_bench [--threads 1] [--rounds 20]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_timing.h"
#include "models/causal_attention.h"

using bench::median;
using bench::now;

int main(int argc, char** argv) {
  int threads = 1, rounds = 20;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc || (flag != "--threads" && flag != "--rounds")) {
      std::fprintf(stderr, "usage: attention_bench [--threads N] [--rounds N]\n");
      return 2;
    }
    (flag == "--threads" ? threads : rounds) = std::stoi(argv[i + 1]);
  }
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  // The gpt's block (d 128, 4 heads) at seq 256, micro-batches 8 and 32, and a short batch.
  constexpr int64_t d = 128, heads = 4;
  for (const auto& [batch, length] :
       std::vector<std::pair<int64_t, int64_t>>{{8, 256}, {32, 256}, {8, 100}}) {
    const auto qkv = torch::randn({batch, length, 3 * d}).set_requires_grad(true);
    const auto upstream = torch::randn({batch, length, d});
    std::vector<double> theirs, ours, ratios;
    for (int round = 0; round < rounds + 2; ++round) {
      double seconds[2];
      for (int which = 0; which < 2; ++which) {
        const double start = now();
        const auto out = which == 0 ? bigbatch::causal_attention_reference(qkv, heads)
                                    : bigbatch::causal_attention_cpu(qkv, heads);
        out.backward(upstream);
        qkv.mutable_grad() = torch::Tensor();
        seconds[which] = now() - start;
      }
      if (round < 2)
        continue;  // warm-up
      theirs.push_back(seconds[0]);
      ours.push_back(seconds[1]);
      ratios.push_back(seconds[0] / seconds[1]);
    }
    std::printf(
        "{\"qkv\": \"%lldx%lldx%lld\", \"heads\": %lld, \"threads\": %d, \"reference_ms\": %.2f, "
        "\"kernel_ms\": %.2f, \"speed_up\": %.2f, \"speed_up_min\": %.2f, \"speed_up_max\": "
        "%.2f}\n",
        static_cast<long long>(batch), static_cast<long long>(length),
        static_cast<long long>(3 * d), static_cast<long long>(heads), threads, 1e3 * median(theirs),
        1e3 * median(ours), median(ratios), *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()));
  }
  return 0;
}
