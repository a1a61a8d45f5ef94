#include "batching/batch_plan.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

const NameTable<LastWindow>& last_window_names() {
  static const NameTable<LastWindow> table{
      "last window policy",
      "--last-window",
      {{LastWindow::Keep, "keep"}, {LastWindow::Drop, "drop"}}};
  return table;
}

std::string BatchPlan::describe() const {
  std::string text = std::to_string(global_batch_size) + " = micro " +
                     std::to_string(micro_batch_size) + " x accumulation " +
                     std::to_string(accumulation_steps) + " x world " + std::to_string(world_size);
  if (has_uneven_micro_batches())
    text += " (each window's last micro-batch: " + std::to_string(last_micro_batch_size()) + ")";
  return text;
}

namespace {

// Far beyond any real batch, and small enough that micro x accumulation x world cannot
// overflow int64 (2^31 x 2^31 x 2^20 < 2^63 would not hold, so the product is checked too).
constexpr int64_t kMaxSize = int64_t{1} << 31;

void require_positive(const std::optional<int64_t>& value, const char* flag) {
  if (value && *value <= 0) {
    throw Error(ErrorKind::Plan,
                std::string(flag) + " must be a positive integer, got " + std::to_string(*value),
                std::string("pass ") + flag + " 1 or larger");
  }
  if (value && *value > kMaxSize) {
    throw Error(ErrorKind::Plan, std::string(flag) + " " + std::to_string(*value) + " is too large",
                "batch sizes go up to 2^31");
  }
}

int64_t checked_product(int64_t a, int64_t b, int64_t c) {
  int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc) || abc > kMaxSize) {
    throw Error(ErrorKind::Plan,
                "micro " + std::to_string(a) + " x accumulation " + std::to_string(b) +
                    " x world " + std::to_string(c) + " is too large a global batch",
                "global batches go up to 2^31");
  }
  return abc;
}

// Divisors of n closest to `near` from below and above (excluding `near` itself).
std::vector<int64_t> nearest_divisors(int64_t n, int64_t near) {
  std::optional<int64_t> below, above;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0)
      continue;
    for (int64_t candidate : {d, n / d}) {
      if (candidate < near && (!below || candidate > *below))
        below = candidate;
      if (candidate > near && (!above || candidate < *above))
        above = candidate;
    }
  }
  std::vector<int64_t> out;
  if (below)
    out.push_back(*below);
  if (above)
    out.push_back(*above);
  return out;
}

// Multiples of `step` closest to `value` from below and above.
std::vector<int64_t> nearest_multiples(int64_t value, int64_t step) {
  std::vector<int64_t> out;
  const int64_t lower = (value / step) * step;
  if (lower > 0)
    out.push_back(lower);
  out.push_back(lower + step);
  return out;
}

std::string alternatives(const std::string& flag, const std::vector<int64_t>& values) {
  std::vector<std::string> parts;
  for (int64_t v : values)
    parts.push_back(flag + " " + std::to_string(v));
  return join(parts, " or ");
}

// global = part x rest, where `part` is the size given beside global (micro or accumulation)
// and `rest` is derived. Fails with the nearest valid choices when it does not divide.
int64_t derive_factor(int64_t global, int64_t part, int64_t world, const char* part_flag,
                      const char* derived_name) {
  const int64_t unit = part * world;
  if (global % unit == 0)
    return global / unit;
  std::vector<std::string> hints;
  hints.push_back(alternatives("--global-batch", nearest_multiples(global, unit)));
  if (global % world == 0) {
    const auto divisors = nearest_divisors(global / world, part);
    if (!divisors.empty())
      hints.push_back(alternatives(part_flag, divisors));
  }
  throw Error(ErrorKind::Plan,
              "global batch " + std::to_string(global) + " is not divisible by " + part_flag + " " +
                  std::to_string(part) + " x world " + std::to_string(world) + " = " +
                  std::to_string(unit) + ", so " + derived_name + " would not be whole",
              "nearest valid: " + join(hints, ", or "));
}

// The per-rank batch: the global batch split evenly across ranks, or an error naming the
// nearest global batches that split.
int64_t per_rank_share(int64_t global, int64_t world) {
  if (global % world == 0)
    return global / world;
  throw Error(ErrorKind::Plan,
              "global batch " + std::to_string(global) + " is not divisible by world " +
                  std::to_string(world) + ", so ranks would see different batches",
              "nearest valid: " + alternatives("--global-batch", nearest_multiples(global, world)));
}

// Micro-steps a rank needs for `per_rank` samples at `micro` per pass (the last may be smaller).
int64_t micro_steps_for(int64_t per_rank, int64_t micro, int64_t world) {
  if (micro > per_rank) {
    throw Error(ErrorKind::Plan,
                "micro batch " + std::to_string(micro) + " is larger than the per-rank batch " +
                    std::to_string(per_rank) + " (global " + std::to_string(per_rank * world) +
                    " / world " + std::to_string(world) + ")",
                "use --micro-batch " + std::to_string(per_rank) + " or less");
  }
  return (per_rank + micro - 1) / micro;
}

}  // namespace

int64_t BatchPlan::per_rank_batch_size() const {
  return global_batch_size / world_size;
}

int64_t BatchPlan::last_micro_batch_size() const {
  return per_rank_batch_size() - micro_batch_size * (accumulation_steps - 1);
}

BatchPlan BatchPlan::with_micro_batch(int64_t micro) const {
  BatchRequest request;
  request.global_batch_size = global_batch_size;
  request.micro_batch_size = micro;
  request.world_size = world_size;
  return resolve(request);
}

BatchPlan BatchPlan::resolve(const BatchRequest& request) {
  require_positive(request.global_batch_size, "--global-batch");
  require_positive(request.micro_batch_size, "--micro-batch");
  require_positive(request.accumulation_steps, "--accum-steps");
  if (request.world_size <= 0 || request.world_size > (int64_t{1} << 20)) {
    throw Error(ErrorKind::Plan,
                "world size must be a positive integer up to 2^20, got " +
                    std::to_string(request.world_size),
                "check WORLD_SIZE or --world-size");
  }

  auto global = request.global_batch_size;
  auto micro = request.micro_batch_size;
  auto accum = request.accumulation_steps;
  const int64_t world = request.world_size;
  const int given = int(global.has_value()) + int(micro.has_value()) + int(accum.has_value());
  if (given < 2 && !global)
    global = kDefaultGlobalBatchSize;
  if (given < 2 && !micro && !accum) {
    micro = kDefaultMicroBatchSize;
    // A default, not the user's: never more than a rank's share of a smaller global batch
    // (global 50 on 2 ranks: micro 25, not a refusal of a size nobody asked for).
    if (global && *global > 0 && *global % world == 0)
      micro = std::min(*micro, *global / world);
  }

  BatchPlan plan;
  plan.world_size = world;
  if (global && micro && accum) {
    const int64_t product = checked_product(*micro, *accum, world);
    // Consistent also when the last micro-batch is the smaller one (global 1000 = 16 x 63 + 8).
    const bool uneven_fits = *global % world == 0 && *micro <= *global / world &&
                             micro_steps_for(*global / world, *micro, world) == *accum;
    if (product != *global && !uneven_fits) {
      std::string hint = "drop one of the three flags to have it derived";
      if (*global % world == 0 && *micro <= *global / world) {
        hint += ", or use --accum-steps " +
                std::to_string(micro_steps_for(*global / world, *micro, world));
      }
      throw Error(ErrorKind::Plan,
                  "global batch " + std::to_string(*global) + " != micro " +
                      std::to_string(*micro) + " x accumulation " + std::to_string(*accum) +
                      " x world " + std::to_string(world) + " = " + std::to_string(product),
                  hint);
    }
    plan.micro_batch_size = *micro;
    plan.accumulation_steps = *accum;
    plan.global_batch_size = *global;
  } else if (global && micro) {
    // The micro-batch need not divide the per-rank batch: each window's last micro-batch takes
    // the rest, and the engine weights it by its true item count.
    plan.micro_batch_size = *micro;
    plan.accumulation_steps = micro_steps_for(per_rank_share(*global, world), *micro, world);
    plan.global_batch_size = *global;
    plan.derived = "accumulation_steps";
  } else if (global && accum) {
    plan.accumulation_steps = *accum;
    plan.micro_batch_size = derive_factor(*global, *accum, world, "--accum-steps", "micro batch");
    plan.global_batch_size = *global;
    plan.derived = "micro_batch_size";
  } else {
    BB_INTERNAL_ASSERT(micro && accum, "resolve() filled in defaults for fewer than two sizes");
    plan.micro_batch_size = *micro;
    plan.accumulation_steps = *accum;
    plan.global_batch_size = checked_product(*micro, *accum, world);
    plan.derived = "global_batch_size";
  }
  return plan;
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Rank r's share of a window of `size` samples: equal parts, the first size % world ranks
// taking one extra sample. Full windows divide exactly (the plan guarantees it).
std::pair<int64_t, int64_t> rank_share(int64_t size, int64_t world, int64_t rank) {
  const int64_t base = size / world;
  const int64_t extra = size % world;
  const int64_t offset = rank * base + std::min(rank, extra);
  return {offset, base + (rank < extra ? 1 : 0)};
}
}  // namespace

EpochPlan plan_epoch(const BatchPlan& plan, int64_t dataset_size, LastWindow last_window,
                     double items_per_sample) {
  if (dataset_size <= 0) {
    throw Error(ErrorKind::Plan,
                "dataset size must be positive, got " + std::to_string(dataset_size),
                "check --dataset-size, --train-subset or the dataset files");
  }
  if (plan.micro_batch_size > dataset_size) {
    throw Error(ErrorKind::Plan,
                "micro batch " + std::to_string(plan.micro_batch_size) +
                    " is larger than the dataset (" + std::to_string(dataset_size) + " samples)",
                "use --micro-batch " + std::to_string(dataset_size) + " or less");
  }
  const int64_t global = plan.global_batch_size;
  EpochPlan epoch;
  epoch.items_per_sample = items_per_sample;
  epoch.dataset_size = dataset_size;
  epoch.last_window = last_window;
  epoch.full_updates = dataset_size / global;
  const int64_t remainder = dataset_size % global;
  if (remainder > 0 && last_window == LastWindow::Keep) {
    epoch.last_window_size = remainder;
  } else {
    epoch.dropped_samples = remainder;
  }
  epoch.updates_per_epoch = epoch.full_updates + (epoch.last_window_size > 0 ? 1 : 0);
  if (epoch.updates_per_epoch == 0) {
    throw Error(
        ErrorKind::Plan,
        "global batch " + std::to_string(global) + " is larger than the dataset (" +
            std::to_string(dataset_size) + " samples) and --last-window drop leaves no update",
        "use --last-window keep or a global batch of at most " + std::to_string(dataset_size));
  }
  epoch.samples_per_epoch = epoch.full_updates * global + epoch.last_window_size;
  epoch.micro_steps_per_epoch = epoch.full_updates * plan.accumulation_steps;
  if (epoch.last_window_size > 0) {
    const auto share = rank_share(epoch.last_window_size, plan.world_size, 0);
    epoch.micro_steps_per_epoch += ceil_div(share.second, plan.micro_batch_size);
  }
  if (global > dataset_size) {
    epoch.warnings.push_back("global batch " + std::to_string(global) +
                             " is larger than the dataset (" + std::to_string(dataset_size) +
                             " samples): every update uses the whole dataset once");
  } else if (epoch.dropped_samples > 0) {
    epoch.warnings.push_back(std::to_string(epoch.dropped_samples) +
                             " samples per epoch are not used (--last-window drop)");
  }
  return epoch;
}

UpdateWindow window_for_update(const BatchPlan& plan, const EpochPlan& epoch,
                               int64_t update_in_epoch, int64_t rank) {
  BB_INTERNAL_ASSERT(update_in_epoch >= 0 && update_in_epoch < epoch.updates_per_epoch,
                     "update " + std::to_string(update_in_epoch) + " outside the epoch");
  const UpdateWindow window = window_at(plan, epoch.dataset_size, epoch.last_window,
                                        update_in_epoch * plan.global_batch_size, rank);
  BB_INTERNAL_ASSERT(window.size == (update_in_epoch < epoch.full_updates ? plan.global_batch_size
                                                                          : epoch.last_window_size),
                     "the epoch plan and the window disagree");
  return window;
}

UpdateWindow window_at(const BatchPlan& plan, int64_t dataset_size, LastWindow last_window,
                       int64_t begin, int64_t rank) {
  BB_INTERNAL_ASSERT(begin >= 0 && begin <= dataset_size, "window outside the epoch");
  BB_INTERNAL_ASSERT(rank >= 0 && rank < plan.world_size, "rank outside the world");
  UpdateWindow window;
  window.begin = begin;
  const int64_t rest = dataset_size - begin;
  window.size = rest >= plan.global_batch_size    ? plan.global_batch_size
                : last_window == LastWindow::Keep ? rest
                                                  : 0;
  const auto share = rank_share(window.size, plan.world_size, rank);
  window.rank_begin = window.begin + share.first;
  window.rank_size = share.second;
  for (int64_t left = window.rank_size; left > 0; left -= plan.micro_batch_size) {
    window.micro_batch_sizes.push_back(std::min(left, plan.micro_batch_size));
  }
  return window;
}

}  // namespace bigbatch
