#include "schedule/interval.h"

#include <cmath>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {
[[noreturn]] void bad_interval(const std::string& text, const std::string& why) {
  throw Error(ErrorKind::Config, "interval '" + text + "' " + why,
              "write a number with a unit: 500u (updates), 3e (epochs), 120000s (samples) or "
              "4Mt (tokens)");
}
}  // namespace

Interval Interval::parse(const std::string& raw) {
  const std::string text = trim(raw);
  if (text.empty())
    bad_interval(raw, "is empty");
  if (text == "0")
    return Interval(0, Unit::Updates);
  Unit unit;
  switch (text.back()) {
    case 'u':
      unit = Unit::Updates;
      break;
    case 'e':
      unit = Unit::Epochs;
      break;
    case 's':
      unit = Unit::Samples;
      break;
    case 't':
      unit = Unit::Tokens;
      break;
    default: {
      // A duration is a unit, only not one of the amounts of training an interval counts in
      // (--checkpoint-every takes minutes; intervals are where the data is).
      const size_t letters = text.find_first_not_of("0123456789.");
      const std::string suffix = letters == std::string::npos ? "" : text.substr(letters);
      if (suffix == "min" || suffix == "h" || suffix == "m")
        bad_interval(raw,
                     "is a duration: intervals count training (updates, epochs, samples, "
                     "tokens), not time");
      bad_interval(raw,
                   suffix.empty() ? "has no unit" : "has no unit ('" + suffix + "' is not one)");
    }
  }
  std::string number = text.substr(0, text.size() - 1);
  double multiplier = 1;
  if (!number.empty()) {
    switch (number.back()) {
      case 'k':
        multiplier = 1e3;
        break;
      case 'M':
        multiplier = 1e6;
        break;
      case 'G':
        multiplier = 1e9;
        break;
      default:
        break;
    }
    if (multiplier != 1)
      number.pop_back();
  }
  const auto value = parse_double(number);
  if (!value)
    bad_interval(raw, "is not a number followed by a unit");
  if (*value < 0)
    bad_interval(raw, "is negative");
  const double scaled = *value * multiplier;
  // Far beyond any run, and small enough that every conversion to updates stays exact in int64.
  if (scaled > 1e15)
    bad_interval(raw, "is too large (at most 1e15)");
  if (unit != Unit::Epochs && scaled != std::floor(scaled)) {
    bad_interval(raw, "is not a whole number of updates, samples or tokens");
  }
  return Interval(scaled, unit);
}

int64_t Interval::to_updates(const BatchPlan& plan, const EpochPlan& epoch) const {
  // Epochs times updates per epoch can still exceed int64 for absurd inputs.
  if (unit_ == Unit::Epochs && value_ * double(epoch.updates_per_epoch) > 1e15) {
    throw Error(ErrorKind::Config, "interval '" + to_string() + "' is more than 1e15 updates",
                "use a smaller interval");
  }
  switch (unit_) {
    case Unit::Updates:
      return static_cast<int64_t>(value_);
    case Unit::Epochs:
      // The small slack keeps 0.1e x 10 updates at exactly 1, not 2, after rounding error.
      return static_cast<int64_t>(std::ceil(value_ * double(epoch.updates_per_epoch) - 1e-9));
    case Unit::Tokens:
    case Unit::Samples: {
      if (unit_ == Unit::Tokens && epoch.items_per_sample <= 0) {
        throw Error(ErrorKind::Config,
                    "interval '" + to_string() +
                        "' counts tokens, but these samples are not "
                        "token sequences",
                    "count updates (u), epochs (e) or samples (s); bigbatch plan --dataset-size "
                    "takes --tokens-per-sample for a language model");
      }
      // Tokens: the samples that hold that many target tokens on average, rounded up.
      const auto samples = static_cast<int64_t>(
          unit_ == Unit::Samples ? value_ : std::ceil(value_ / epoch.items_per_sample - 1e-9));
      const int64_t whole_epochs = samples / epoch.samples_per_epoch;
      const int64_t rest = samples % epoch.samples_per_epoch;
      const int64_t rest_updates = (rest + plan.global_batch_size - 1) / plan.global_batch_size;
      return whole_epochs * epoch.updates_per_epoch + rest_updates;
    }
  }
  return 0;
}

std::string Interval::to_string() const {
  const char suffix = unit_ == Unit::Updates  ? 'u'
                      : unit_ == Unit::Epochs ? 'e'
                      : unit_ == Unit::Tokens ? 't'
                                              : 's';
  return format_double(value_) + suffix;
}

Cadence Cadence::parse(const std::string& raw) {
  const std::string text = trim(raw);
  Cadence cadence;
  for (const auto& [suffix, factor] :
       {std::pair<const char*, double>{"min", 60.0}, {"h", 3600.0}}) {
    const std::string unit = suffix;
    if (text.size() > unit.size() &&
        text.compare(text.size() - unit.size(), unit.size(), unit) == 0) {
      const auto value = parse_double(text.substr(0, text.size() - unit.size()));
      if (!value || *value <= 0) {
        throw Error(ErrorKind::Config,
                    "cadence '" + raw + "' is not a positive number of minutes or hours",
                    "write e.g. 30min or 2h, or an amount of training such as 200u or 1e");
      }
      cadence.seconds = *value * factor;
      return cadence;
    }
  }
  const std::string micro = "micro";
  if (text.size() > micro.size() &&
      text.compare(text.size() - micro.size(), micro.size(), micro) == 0) {
    const auto value = parse_int(text.substr(0, text.size() - micro.size()));
    if (!value || *value <= 0) {
      throw Error(ErrorKind::Config,
                  "cadence '" + raw + "' is not a positive whole number of micro-steps",
                  "write e.g. 40micro");
    }
    cadence.micro_steps = *value;
    return cadence;
  }
  cadence.amount = Interval::parse(text);
  if (cadence.amount->is_zero()) {
    throw Error(ErrorKind::Config, "cadence '" + raw + "' is zero", "write e.g. 200u, 1e or 30min");
  }
  return cadence;
}

std::string Cadence::to_string() const {
  if (amount)
    return amount->to_string();
  if (micro_steps > 0)
    return std::to_string(micro_steps) + "micro";
  return format_double(seconds / 60.0) + "min";
}

}  // namespace bigbatch
