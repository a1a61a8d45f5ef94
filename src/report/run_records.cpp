#include "report/run_records.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"

namespace bigbatch {

namespace {

// Why a parsed line is no record: a JSON value other than an object, or a field bigbatch reads
// holding another type. Names (strings) under these keys, and numbers (or null) under the keys
// the report, the resume and the sweep read. Any other key is ignored whatever it holds: a newer
// version's field must not make an older bigbatch refuse the file.
std::string record_problem(const nlohmann::json& record) {
  if (!record.is_object())
    return std::string("a JSON ") + record.type_name() + ", not a record";
  static const char* const kTextKeys[] = {"event",     "metric", "error",
                                          "condition", "device", "reason"};
  static const char* const kNumberKeys[] = {"step",     "samples_seen", "epoch",
                                            "loss",     "lr",           "train_loss",
                                            "val_loss", "test_loss",    "train_seconds"};
  const auto listed = [](const auto& keys, const std::string& key) {
    return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
  };
  for (const auto& [key, value] : record.items()) {
    const bool text_key = listed(kTextKeys, key);
    const bool number_key = listed(kNumberKeys, key);
    if ((text_key && value.is_string()) || (number_key && (value.is_number() || value.is_null())) ||
        (!text_key && !number_key))
      continue;
    return "\"" + key + "\" is " + (value.is_string() ? "a string" : value.type_name()) +
           (text_key ? ", not a name" : ", not a number");
  }
  return "";
}

// Why a line is not JSON: the parser's `what` without its prefix ("[json.exception...] parse
// error at line 1, column 22: syntax error while parsing value - invalid string: ill-formed
// UTF-8 byte; last read: ..."), said plainly where the cause is a known one.
std::string json_problem(const std::string& line, std::string what) {
  if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
    what = what.substr(what.find("] ") + 2);
  const size_t reason = what.find(" - ");
  if (reason != std::string::npos)
    what = what.substr(reason + 3);
  const size_t read = what.find("; last read:");
  if (read != std::string::npos)
    what = what.substr(0, read);
  if (line.find("NaN") != std::string::npos || line.find("Infinity") != std::string::npos)
    what += " (NaN and Infinity are not JSON numbers)";
  else if (what.find("number overflow") != std::string::npos)
    what += " (a number beyond a double's range)";
  return "not JSON: " + what;
}

}  // namespace

void check_metrics_record(const nlohmann::json& record, const std::string& metrics_path,
                          size_t line) {
  const std::string problem = record_problem(record);
  if (problem.empty())
    return;
  throw Error(ErrorKind::Format,
              "metrics file '" + metrics_path + "' line " + std::to_string(line) + ": " + problem,
              "the file was changed by hand or by another program: restore it, or delete "
              "that line");
}

RunRecords read_run_records(const std::string& metrics_path) {
  RunRecords records;
  const std::vector<std::string> lines =
      split(read_text_file(metrics_path, kMaxMetricsFileBytes), '\n');
  size_t last = lines.size();  // the last line that holds anything
  while (last > 0 && trim(lines[last - 1]).empty())
    --last;
  for (size_t number = 1; number <= last; ++number) {
    const std::string& line = lines[number - 1];
    if (trim(line).empty())
      continue;
    nlohmann::json record;
    std::string problem;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for 1e400
      if (number == last)
        continue;  // the last line, cut short by a crash
      problem = json_problem(line, e.what());
    }
    if (problem.empty())
      problem = record_problem(record);
    if (!problem.empty()) {
      records.skipped.push_back("line " + std::to_string(number) + ": " + problem);
      continue;
    }
    if (record.contains("event")) {
      if (record["event"] == "evaluation")
        records.evaluations.push_back(record);
      records.events.push_back(std::move(record));
    } else if (record.contains("loss")) {
      records.updates.push_back(std::move(record));
    } else if (record.contains("epoch") && record.contains("train_loss")) {
      records.epochs.push_back(std::move(record));
    }
  }
  return records;
}

std::vector<nlohmann::json> RunRecords::held_out() const {
  // An interval's evaluation at the update where an epoch's record was also written (the run
  // ended there) holds the same figures: the epoch's stands for both.
  std::vector<nlohmann::json> out = epochs;
  for (const auto& e : evaluations) {
    const bool recorded = std::any_of(epochs.begin(), epochs.end(), [&](const nlohmann::json& x) {
      return x.value("step", -1.0) == e.value("step", -2.0);
    });
    if (!recorded)
      out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("step", 0.0) < b.value("step", 0.0);
  });
  return out;
}

std::vector<ChartPoint> record_points(const std::vector<nlohmann::json>& records, const char* x_key,
                                      const char* y_key, double scale) {
  std::vector<ChartPoint> out;
  for (const auto& r : records) {
    const nlohmann::json x = r.value(x_key, nlohmann::json());
    const nlohmann::json y = r.value(y_key, nlohmann::json());
    if (x.is_number() && y.is_number())
      out.push_back({x.get<double>(), y.get<double>() * scale});
  }
  return out;
}

std::vector<ChartPoint> smoothed(const std::vector<ChartPoint>& points, double weight) {
  std::vector<ChartPoint> out;
  double average = 0;
  double debias = 1;  // weight^n: the share of the average that is still the initial 0
  for (const ChartPoint& p : points) {
    if (!std::isfinite(p.y))
      continue;
    average = weight * average + (1 - weight) * p.y;
    debias *= weight;
    out.push_back({p.x, average / (1 - debias)});
  }
  return out;
}

}  // namespace bigbatch
