#include "report/run_records.h"

#include "core/files.h"
#include "core/text.h"

namespace bigbatch {

RunRecords read_run_records(const std::string& metrics_path) {
  RunRecords records;
  for (const auto& line : split(read_text_file(metrics_path), '\n')) {
    if (trim(line).empty())
      continue;
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object())
      continue;  // a line cut short by a crash
    if (record.contains("event")) {
      records.events.push_back(std::move(record));
    } else if (record.contains("loss")) {
      records.updates.push_back(std::move(record));
    } else if (record.contains("test_accuracy")) {
      records.epochs.push_back(std::move(record));
    }
  }
  return records;
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

}  // namespace bigbatch
