#pragma once
// Wall-clock durations for what the trainer times (updates, checkpoint cadences, the whole run):
// the monotonic clock, so a clock adjustment never makes time run backwards.
//
//   const SteadyClock::time_point start = SteadyClock::now();
//   double seconds = seconds_since(start);
#include <chrono>

namespace bigbatch {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_between(SteadyClock::time_point start, SteadyClock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

inline double seconds_since(SteadyClock::time_point start) {
  return seconds_between(start, SteadyClock::now());
}

}  // namespace bigbatch
