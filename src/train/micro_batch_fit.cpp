#include "train/micro_batch_fit.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/text.h"
#include "device/device.h"
#include "dist/gradient_reducer.h"
#include "memory/tracking_allocator.h"
#include "train/accumulation_engine.h"

namespace bigbatch {

namespace {

using Clock = std::chrono::steady_clock;

// Restores the caller's budget however a probe ends.
class BudgetScope {
 public:
  explicit BudgetScope(int64_t bytes) : previous_(memory_counters().budget_bytes) {
    set_memory_budget(bytes);
  }
  ~BudgetScope() { set_memory_budget(previous_); }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  int64_t previous_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Builds the model and optimizer afresh at `micro`, runs two updates, and (when asked) times
// accumulating micro-steps: the probe's peak, whether it fits, one round of timing.
FitProbe probe(int64_t micro, const ModelFactory& make_model, const OptimizerSettings& settings,
               const TensorDataset& data, const std::vector<int64_t>& order,
               const FitOptions& options) {
  FitProbe result;
  result.micro_batch = micro;
  BudgetScope budget(options.budget_bytes);
  // A GPU's allocator keeps what the last probe freed; each probe starts from what is in use.
  release_cached_memory();
  reset_peak_memory();
  try {
    auto model = make_model();
    model->to(options.device);
    model->train();
    auto optimizer = make_optimizer(settings, model->parameters());
    LocalReducer reducer;
    EngineOptions engine_options;
    engine_options.task = Task::of(*model, data);
    AccumulationEngine engine(model, *optimizer, reducer, engine_options);
    BatchAssembler assembler(data, micro);
    const Batch batch = assembler.gather(order, 0, micro);
    // Two updates: the optimizer creates its state in the first, and the second runs a
    // micro-step with weights, gradients and that state all alive — the steady state.
    for (int update = 0; update < 2; ++update) {
      engine.begin_window(batch.size(), batch.items);
      engine.micro_step(batch, AccumulationEngine::MicroStep::Last);
      engine.update(/*lr=*/0.0);
    }
    if (options.measure_speed) {
      // Accumulating micro-steps, as a window of any length runs them.
      int64_t steps = 0;
      synchronize_device(options.device);
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        engine.micro_step(batch);
        ++steps;
        // Queued work counts: a GPU's micro-step is done when the device says so.
        synchronize_device(options.device);
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (steps < 2 || elapsed < options.seconds_per_probe);
      result.samples_per_s = double(steps * micro) / elapsed;
      result.rounds = {result.samples_per_s};
      engine.discard();
    }
    result.peak_bytes = memory_counters().peak_bytes;
    result.fits = result.peak_bytes <=
                  static_cast<int64_t>(double(options.budget_bytes) * (1.0 - options.margin));
  } catch (const c10::OutOfMemoryError&) {
    result.fits = false;
    result.peak_bytes = 0;
    result.samples_per_s = 0;
    result.rounds.clear();
  }
  if (options.on_probe)
    options.on_probe(micro, result.fits);
  return result;
}

std::vector<int64_t> rows_longest_first(const TensorDataset& data, int64_t count) {
  std::vector<int64_t> rows(static_cast<size_t>(data.size()));
  std::iota(rows.begin(), rows.end(), int64_t{0});
  if (data.is_tokens()) {
    std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) {
      return data.lengths[size_t(a)] > data.lengths[size_t(b)];
    });
  }
  rows.resize(static_cast<size_t>(count));
  return rows;
}

}  // namespace

FitResult fit_micro_batch(const ModelFactory& make_model, const OptimizerSettings& optimizer,
                          const TensorDataset& data, const FitOptions& options) {
  BB_INTERNAL_ASSERT(tracking_allocator_installed(), "fit needs the tracking allocator");
  BB_INTERNAL_ASSERT(options.budget_bytes > 0, "fit needs a budget");
  const int64_t cap = std::min(options.max_micro_batch, data.size());
  BB_INTERNAL_ASSERT(cap >= 1, "fit needs at least one sample");

  // Token rows: the longest first, so a probe of any size is padded to the dataset's longest
  // row and holds as many of the longest as it can — the micro-batch no window can exceed
  // (a micro-batch costs rows x its longest). Samples of one shape: the first `cap`.
  std::vector<int64_t> order = rows_longest_first(data, cap);
  std::map<int64_t, FitProbe> probes;
  auto fits = [&](int64_t micro) {
    auto found = probes.find(micro);
    if (found == probes.end())
      found =
          probes.emplace(micro, probe(micro, make_model, optimizer, data, order, options)).first;
    return found->second.fits;
  };

  // Doubling until a size does not fit (or the cap), then a binary search between the last
  // size that fit and the first that did not, to within 1/32 of the size (a few per cent of
  // memory is below what fragmentation and the margin decide anyway).
  int64_t good = 0;
  int64_t bad = 0;
  for (int64_t micro = 1;; micro = std::min(cap, micro * 2)) {
    if (!fits(micro)) {
      bad = micro;
      break;
    }
    good = micro;
    if (micro == cap)
      break;
  }
  while (bad > 0 && bad - good > std::max<int64_t>(1, good / 32)) {
    const int64_t middle = good + (bad - good) / 2;
    if (fits(middle)) {
      good = middle;
    } else {
      bad = middle;
    }
  }

  // More rounds of timing, the fitting sizes taking turns.
  if (options.measure_speed) {
    for (int round = 1; round < options.timing_rounds; ++round) {
      for (auto& [micro, row] : probes) {
        if (!row.fits)
          continue;
        const FitProbe again = probe(micro, make_model, optimizer, data, order, options);
        if (again.fits && again.samples_per_s > 0)
          row.rounds.push_back(again.samples_per_s);
      }
    }
    for (auto& [micro, row] : probes) {
      if (!row.rounds.empty())
        row.samples_per_s = median(row.rounds);
    }
  }

  FitResult result;
  result.budget_bytes = options.budget_bytes;
  result.usable_bytes = static_cast<int64_t>(double(options.budget_bytes) * (1.0 - options.margin));
  result.max_micro_batch = good;
  if (data.is_tokens())
    result.probe_row_tokens = data.lengths[size_t(order.front())];
  const FitProbe* best = nullptr;
  for (const auto& [micro, row] : probes) {
    result.table.push_back(row);
    if (row.fits && row.samples_per_s > 0 && (!best || row.samples_per_s > best->samples_per_s))
      best = &row;
  }
  if (best) {
    // Equally fast: within the fastest's own spread, and at least 3%. The largest of them is
    // named (fewer micro-steps per update); the others are listed.
    // At most 10%: one noisy round must not make a much slower size "as fast".
    const double noise = std::clamp(best->spread(), 0.03, 0.10);
    std::vector<int64_t> tied;
    for (const auto& [micro, row] : probes) {
      if (row.fits && row.samples_per_s >= (1.0 - noise) * best->samples_per_s)
        tied.push_back(micro);
    }
    result.fastest_micro_batch = tied.back();
    tied.pop_back();
    result.as_fast = tied;
  }
  return result;
}

double FitProbe::spread() const {
  if (rounds.size() < 2)
    return 0.0;
  const auto [slowest, fastest] = std::minmax_element(rounds.begin(), rounds.end());
  return (*fastest - *slowest) / median(rounds);
}

const FitProbe* FitResult::row(int64_t micro_batch) const {
  for (const FitProbe& probe : table) {
    if (probe.micro_batch == micro_batch)
      return &probe;
  }
  return nullptr;
}

nlohmann::json FitResult::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : table) {
    rows.push_back({{"micro_batch", row.micro_batch},
                    {"fits", row.fits},
                    {"peak_bytes",
                     row.peak_bytes > 0 ? nlohmann::json(row.peak_bytes) : nlohmann::json(nullptr)},
                    {"samples_per_s", row.samples_per_s > 0 ? nlohmann::json(row.samples_per_s)
                                                            : nlohmann::json(nullptr)},
                    {"samples_per_s_rounds", row.rounds}});
  }
  return {{"budget_bytes", budget_bytes},
          {"usable_bytes", usable_bytes},
          {"max_micro_batch", max_micro_batch},
          {"fastest_micro_batch",
           fastest_micro_batch > 0 ? nlohmann::json(fastest_micro_batch) : nlohmann::json(nullptr)},
          {"as_fast", as_fast},
          {"probe_row_tokens",
           probe_row_tokens > 0 ? nlohmann::json(probe_row_tokens) : nlohmann::json(nullptr)},
          {"table", rows}};
}

std::string FitResult::to_text() const {
  std::string out;
  char line[200];
  std::snprintf(line, sizeof line, "%12s  %12s  %18s  %s\n", "micro batch", "peak memory",
                "samples/s (spread)", "");
  out += line;
  for (const auto& row : table) {
    const std::string peak = row.peak_bytes > 0 ? human_bytes(double(row.peak_bytes)) : "-";
    std::string speed = "-";
    if (row.samples_per_s > 0) {
      speed = human_count(row.samples_per_s);
      if (row.rounds.size() > 1)
        speed += " (" + format_fixed(100 * row.spread(), 0) + "%)";
    }
    const char* verdict = row.fits             ? "fits"
                          : row.peak_bytes > 0 ? "over the margin"
                                               : "out of memory";
    std::string mark;
    if (row.micro_batch == max_micro_batch)
      mark += "  <- largest";
    if (row.micro_batch == fastest_micro_batch)
      mark += "  <- fastest";
    else if (std::find(as_fast.begin(), as_fast.end(), row.micro_batch) != as_fast.end())
      mark += "  <- as fast, within the noise";
    std::snprintf(line, sizeof line, "%12lld  %12s  %18s  %s%s\n",
                  static_cast<long long>(row.micro_batch), peak.c_str(), speed.c_str(), verdict,
                  mark.c_str());
    out += line;
  }
  return out;
}

}  // namespace bigbatch
