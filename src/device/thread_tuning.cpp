#include "device/thread_tuning.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace bigbatch {

std::string ThreadChoice::describe() const {
  if (seconds_per_step.empty()) {
    return std::to_string(threads) +
           " (one CPU available to this process, e.g. OMP_NUM_THREADS=1 under a launcher: "
           "nothing to measure)";
  }
  std::string text = std::to_string(threads) + " (measured per micro-step:";
  for (const auto& [count, seconds] : seconds_per_step) {
    char part[64];
    std::snprintf(part, sizeof part, "%s %lld thread%s %.2f ms",
                  count == seconds_per_step.front().first ? "" : ",", static_cast<long long>(count),
                  count == 1 ? "" : "s", seconds * 1e3);
    text += part;
  }
  return text + ")";
}

ThreadChoice measure_fastest_thread_count(torch::nn::Sequential& model, const ProbeStep& micro_step,
                                          int64_t max_threads) {
  ThreadChoice choice;
  if (max_threads <= 1)
    return choice;
  auto probe = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
  probe->train();
  torch::nn::Sequential probe_model(probe);
  const auto step = [&] { micro_step(probe_model); };
  constexpr int kWarmup = 2;
  constexpr int kTimed = 5;
  std::vector<int64_t> candidates = {1, max_threads};
  if (max_threads > 2)
    candidates.insert(candidates.begin() + 1, max_threads / 2);
  double best = 0;
  for (const int64_t threads : candidates) {
    torch::set_num_threads(static_cast<int>(threads));
    for (int i = 0; i < kWarmup; ++i)
      step();
    std::vector<double> times;
    for (int i = 0; i < kTimed; ++i) {
      const auto start = std::chrono::steady_clock::now();
      step();
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + kTimed / 2, times.end());
    const double median = times[kTimed / 2];
    choice.seconds_per_step.emplace_back(threads, median);
    // Extra threads must earn their keep: within 5%, the smaller count wins (it leaves a
    // core to the data pipeline and to other ranks).
    if (choice.seconds_per_step.size() == 1 || median < best * 0.95) {
      best = median;
      choice.threads = threads;
    }
  }
  return choice;
}

}  // namespace bigbatch
