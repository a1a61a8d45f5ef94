#include "report/metrics_writer.h"

namespace bigbatch {

nlohmann::json MetricsWriter::write(nlohmann::json record) {
  if (record.is_object() && !record.contains("time"))
    record["time"] = unix_time_now();
  std::string line = record.dump();
  line += '\n';
  file_.append(line);
  return record;
}

}  // namespace bigbatch
