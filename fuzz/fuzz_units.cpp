// libFuzzer target: the small parsers of user text (intervals, cadences, numbers, batch
// plans from arbitrary sizes) never crash: a value or a bigbatch::Error.
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
  if (size >= 4 * sizeof(int32_t)) {
    int32_t v[4];
    std::memcpy(v, data, sizeof v);
    try {
      bigbatch::BatchRequest request;
      if (v[0] != 0)
        request.global_batch_size = v[0];
      if (v[1] != 0)
        request.micro_batch_size = v[1];
      if (v[2] % 3 != 0)
        request.accumulation_steps = v[2] % 4096;
      request.world_size = 1 + (v[3] & 7);
      const auto plan = bigbatch::BatchPlan::resolve(request);
      const auto epoch =
          bigbatch::plan_epoch(plan, 1 + (v[3] >> 8 & 0xFFFFF),
                               v[3] < 0 ? bigbatch::LastWindow::Drop : bigbatch::LastWindow::Keep);
      for (int64_t rank = 0; rank < plan.world_size; ++rank) {
        bigbatch::window_for_update(plan, epoch, epoch.updates_per_epoch - 1, rank);
      }
    } catch (const bigbatch::Error&) {
    }
  }
  return 0;
}
