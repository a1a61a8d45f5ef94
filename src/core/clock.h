#pragma once
// Wall-clock durations for what the trainer times (updates, checkpoint cadences, the whole run):
// the monotonic clock, so a clock adjustment never makes time run backwards.
//
//   const SteadyClock::time_point start = SteadyClock::now();
//   double seconds = seconds_since(start);
#include <chrono>

namespace bigbatch {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace bigbatch
