// libFuzzer target: the small parsers of user text (intervals, cadences, numbers) and the batch
// plan's arithmetic on full-range sizes never crash or overflow: a value or a bigbatch::Error.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "batching/batch_plan.h"
#include "core/error.h"
#include "core/text.h"
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
  bigbatch::parse_int(text);
  bigbatch::parse_double(text);
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
      bigbatch::window_for_update(plan, epoch, epoch.updates_per_epoch - 1, rank);
    }
    bigbatch::Interval::parse("3e").to_updates(plan, epoch);
    bigbatch::Interval::parse("1Gs").to_updates(plan, epoch);
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
