#pragma once
// Wall-clock durations for what the trainer times (updates, checkpoint cadences, the whole run):
// the monotonic clock, so a clock adjustment never makes time run backwards. And the calendar
// time records are stamped with (metrics.jsonl's `time`, TensorBoard's wall time).
//
//   const SteadyClock::time_point start = SteadyClock::now();
//   double seconds = seconds_since(start);
#include <chrono>

namespace bigbatch {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// Seconds since the Unix epoch, to the microsecond.
inline double unix_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return double(std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count()) * 1e-6;
}

}  // namespace bigbatch
