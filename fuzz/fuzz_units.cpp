// libFuzzer target: the small parsers of user text (intervals, cadences, numbers) and the batch
// plan's arithmetic on full-range sizes never crash or overflow: a value or a bigbatch::Error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "batching/batch_plan.h"
#include "core/error.h"
#include "core/text.h"
#include "schedule/batch_schedule.h"
#include "schedule/interval.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    bigbatch::Interval::parse(text);
  } catch (const bigbatch::Error&) {
  }
  try {
    bigbatch::Cadence::parse(text);
  } catch (const bigbatch::Error&) {
  }
  try {
    // A batch schedule reads back as itself, and a small ramp walks its epochs covering every
    // sample exactly once per epoch (--last-window keep).
    const auto ramp = bigbatch::GlobalBatchSchedule::parse(text);
    if (bigbatch::GlobalBatchSchedule::parse(ramp.to_string()).to_string() != ramp.to_string())
      __builtin_trap();
    const auto phases = bigbatch::simulate_ramp(
        ramp,
        [](int64_t global) {
          bigbatch::BatchRequest request;
          request.global_batch_size = global;
          request.micro_batch_size = std::min<int64_t>(global, 7);
          return bigbatch::BatchPlan::resolve(request);
        },
        /*dataset_size=*/997, bigbatch::LastWindow::Keep, /*epochs=*/3, /*max_updates=*/3000);
    int64_t samples = 0;
    for (const auto& phase : phases)
      samples += phase.samples;
    if (samples != 3 * 997 && phases.back().updates + phases.back().first_update < 3000)
      __builtin_trap();
  } catch (const bigbatch::Error&) {
  }
  bigbatch::parse_int(text);
  bigbatch::parse_double(text);
  if (const auto bytes = bigbatch::parse_byte_size(text)) {
    // What config.toml writes back must read as the same size.
    if (bigbatch::parse_byte_size(bigbatch::exact_byte_size(*bytes)) != bytes)
      __builtin_trap();
  }
  if (size < 5 * sizeof(int64_t))
    return 0;
  int64_t v[5];
  std::memcpy(v, data, sizeof v);
  try {
    bigbatch::BatchRequest request;
    if (v[0] != 0)
      request.global_batch_size = v[0];
    if (v[1] != 0)
      request.micro_batch_size = v[1];
    if (v[2] != 0)
      request.accumulation_steps = v[2];
    request.world_size = v[3];
    const auto plan = bigbatch::BatchPlan::resolve(request);
    // Windows list their micro-batches: keep the enumeration below small.
    if (plan.world_size > 64 || plan.accumulation_steps > (1 << 16))
      return 0;
    const auto policy = v[4] < 0 ? bigbatch::LastWindow::Drop : bigbatch::LastWindow::Keep;
    const auto epoch = bigbatch::plan_epoch(plan, v[4] & 0xFFFFFFFFFF, policy);
    for (int64_t rank = 0; rank < plan.world_size; ++rank) {
      // Every rank's micro-batches cover its share exactly, none larger than the micro-batch.
      const auto window = bigbatch::window_for_update(plan, epoch, 0, rank);
      int64_t covered = 0;
      for (int64_t micro : window.micro_batch_sizes) {
        if (micro <= 0 || micro > plan.micro_batch_size)
          __builtin_trap();
        covered += micro;
      }
      if (covered != window.rank_size ||
          int64_t(window.micro_batch_sizes.size()) > plan.accumulation_steps)
        __builtin_trap();
      bigbatch::window_for_update(plan, epoch, epoch.updates_per_epoch - 1, rank);
    }
    // The out-of-memory back-off keeps the global batch.
    if (plan.micro_batch_size > 1 &&
        plan.with_micro_batch(plan.micro_batch_size / 2).global_batch_size !=
            plan.global_batch_size)
      __builtin_trap();
    bigbatch::Interval::parse("3e").to_updates(plan, epoch);
    bigbatch::Interval::parse("1Gs").to_updates(plan, epoch);
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
