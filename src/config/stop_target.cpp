#include "config/stop_target.h"

#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {

[[noreturn]] void bad_target(const std::string& text, const std::string& why) {
  throw Error(ErrorKind::Config, "--target '" + text + "' " + why,
              "write METRIC>=X for accuracy or METRIC<=X for loss, perplexity, bpb or rmse, "
              "e.g. --target val_accuracy>=0.9 or --target val_bpb<=1.9 (val_ or test_ "
              "chooses the split)");
}

const std::vector<std::string> kMetrics = {"accuracy", "loss", "perplexity", "bpb", "rmse"};

// "val_bpb" -> {val, bpb}; the reason it names no metric otherwise.
std::optional<std::string> split_metric_name(const std::string& text, WatchedMetric& out) {
  std::string name = trim(text);
  out.split.clear();
  for (const char* split : {"val_", "test_"}) {
    const std::string prefix = split;
    if (name.rfind(prefix, 0) == 0) {
      out.split = prefix.substr(0, prefix.size() - 1);
      name = name.substr(prefix.size());
      break;  // one split: val_test_loss names no metric
    }
  }
  for (const auto& m : kMetrics) {
    if (m == name) {
      out.metric = name;
      return std::nullopt;
    }
  }
  const auto guess = closest_match(name, kMetrics);
  return "names metric '" + name +
         "', which is not one of accuracy, loss, perplexity, bpb or rmse" +
         (guess ? " (did you mean '" + *guess + "'?)" : std::string());
}

}  // namespace

WatchedMetric WatchedMetric::parse(const std::string& text, const std::string& flag) {
  WatchedMetric watched;
  if (const auto why = split_metric_name(text, watched)) {
    throw Error(ErrorKind::Config, flag + " '" + text + "' " + *why,
                "name an evaluated figure: val_loss, val_accuracy, val_bpb, val_perplexity or "
                "val_rmse (test_ reads the test split; no prefix: validation when the run has "
                "one)");
  }
  return watched;
}

std::string WatchedMetric::name() const {
  return (split.empty() ? std::string() : split + "_") + metric;
}

StopTarget StopTarget::parse(const std::string& raw) {
  const std::string text = trim(raw);
  size_t op = text.find("<=");
  bool at_least = false;
  if (op == std::string::npos) {
    op = text.find(">=");
    at_least = true;
  }
  if (op == std::string::npos)
    bad_target(raw, "has no >= or <=");
  StopTarget target;
  if (const auto why = split_metric_name(text.substr(0, op), target))
    bad_target(raw, *why);
  const std::string name = target.metric;
  target.at_least = at_least;
  if (target.rises() != at_least) {
    bad_target(raw, std::string("would stop at once: ") + name + " improves going " +
                        (target.rises() ? "up (write >=)" : "down (write <=)"));
  }
  const auto value = parse_double(trim(text.substr(op + 2)));
  if (!value || !std::isfinite(*value))
    bad_target(raw, "has no number after " + text.substr(op, 2));
  if (name == "accuracy" && (*value <= 0 || *value > 1))
    bad_target(raw, "asks for an accuracy outside (0, 1]: it is a fraction (0.9 for 90%)");
  if (name != "accuracy" && *value < 0)
    bad_target(raw, "asks for a negative " + name);
  if (name == "perplexity" && *value < 1)
    bad_target(raw, "asks for a perplexity below 1, which no model reaches (it is e^loss)");
  target.value = *value;
  return target;
}

StopTarget StopTarget::accuracy(double fraction) {
  StopTarget target;
  target.metric = "accuracy";
  target.at_least = true;
  target.value = fraction;
  return target;
}

std::string WatchedMetric::metric_in(bool has_validation) const {
  const std::string chosen = split.empty() ? (has_validation ? "val" : "test") : split;
  return chosen + "_" + metric;
}

std::string StopTarget::to_string() const {
  return name() + (at_least ? ">=" : "<=") + format_double(value);
}

}  // namespace bigbatch
