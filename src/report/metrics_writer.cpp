#include "report/metrics_writer.h"

#include <chrono>

namespace bigbatch {

double unix_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return double(std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count()) * 1e-6;
}

nlohmann::json MetricsWriter::write(const nlohmann::json& record) {
  nlohmann::json stamped = record;
  if (stamped.is_object() && !stamped.contains("time"))
    stamped["time"] = unix_time_now();
  std::string line = stamped.dump();
  line += '\n';
  file_.append(line);
  return stamped;
}

}  // namespace bigbatch
