#pragma once
// A quantity of training with a unit, parsed once (Marian's SchedulingParameter):
//   "500u" updates, "3e" epochs, "120000s" samples, "4Mt" tokens (language models); SI
//   prefixes k, M, G ("1.2Ms", "50ku").
// Intervals convert to updates through the epoch plan, so a warmup of "2e" means the same
// amount of data whatever the batch size. Tokens become samples through the training set's
// mean target tokens per sample (exact for packed blocks, the corpus's mean for documents).
//
//   Interval warmup = Interval::parse("2e");
//   int64_t updates = warmup.to_updates(plan, epoch);   // 2 x updates_per_epoch
#include <cstdint>
#include <optional>
#include <string>

#include "batching/batch_plan.h"

namespace bigbatch {

class Interval {
 public:
  enum class Unit { Updates, Epochs, Samples, Tokens };

  Interval() = default;
  Interval(double value, Unit unit) : value_(value), unit_(unit) {}

  // Throws bigbatch::Error (Config) naming the text and the accepted forms.
  static Interval parse(const std::string& text);
  static Interval updates(int64_t count) { return Interval(double(count), Unit::Updates); }

  double value() const { return value_; }
  Unit unit() const { return unit_; }
  bool is_zero() const { return value_ == 0; }

  // The number of updates needed to cover this much training (rounded up). Tokens need token
  // rows (epoch.items_per_sample > 0): bigbatch::Error (Config) otherwise.
  int64_t to_updates(const BatchPlan& plan, const EpochPlan& epoch) const;
  // The text form, parseable by parse(): "500u", "2e", "120000s", "4000000t".
  std::string to_string() const;

 private:
  double value_ = 0;
  Unit unit_ = Unit::Updates;
};

// How often something recurring happens (checkpoints): an amount of training ("200u", "1e",
// "120000s"), wall-clock time ("30min", "2h"), or micro-steps ("40micro", which may fall inside
// an accumulation window).
struct Cadence {
  std::optional<Interval> amount;
  double seconds = 0;       // > 0 for a time cadence
  int64_t micro_steps = 0;  // > 0 for "40micro": inside accumulation windows too

  static Cadence parse(const std::string& text);
  bool is_set() const { return amount.has_value() || seconds > 0 || micro_steps > 0; }
  std::string to_string() const;
};

}  // namespace bigbatch
