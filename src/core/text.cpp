#include "core/text.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>

namespace bigbatch {

std::optional<int64_t> parse_int(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty())
    return std::nullopt;
  int64_t value = 0;
  const char* begin = t.data();
  if (*begin == '+')
    ++begin;
  auto [end, ec] = std::from_chars(begin, t.data() + t.size(), value);
  if (ec != std::errc() || end != t.data() + t.size())
    return std::nullopt;
  return value;
}

std::optional<double> parse_double(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty())
    return std::nullopt;
  // strtod instead of from_chars<double>: GCC 12's libstdc++ has it, older ones do not.
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || errno == ERANGE || !std::isfinite(value))
    return std::nullopt;
  return value;
}

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string current;
  for (char c : text) {
    if (c == separator) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0)
      out += separator;
    out += parts[i];
  }
  return out;
}

std::string human_count(double value) {
  char buffer[32];
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e9) {
    std::snprintf(buffer, sizeof buffer, "%.1fG", value / 1e9);
  } else if (magnitude >= 1e6) {
    std::snprintf(buffer, sizeof buffer, "%.1fM", value / 1e6);
  } else if (magnitude >= 1e4) {
    std::snprintf(buffer, sizeof buffer, "%.1fk", value / 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  }
  return buffer;
}

std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  while (std::fabs(bytes) >= 1024 && unit + 1 < std::size(units)) {
    bytes /= 1024;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return buffer;
}

std::optional<int64_t> parse_byte_size(const std::string& text) {
  const std::string t = trim(text);
  size_t split_at = t.size();
  while (split_at > 0 && std::isalpha(static_cast<unsigned char>(t[split_at - 1])))
    --split_at;
  const auto number = parse_double(trim(t.substr(0, split_at)));
  std::string unit = t.substr(split_at);
  for (char& c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> units[] = {
      {"b", 1.0},    {"kib", 0x1p10}, {"mib", 0x1p20}, {"gib", 0x1p30}, {"tib", 0x1p40},
      {"kb", 1e3},   {"mb", 1e6},     {"gb", 1e9},     {"tb", 1e12},    {"k", 0x1p10},
      {"m", 0x1p20}, {"g", 0x1p30},   {"t", 0x1p40}};
  if (!number || !std::isfinite(*number) || *number < 0)
    return std::nullopt;
  for (const auto& [name, scale] : units) {
    if (unit != name)
      continue;
    const double bytes = std::round(*number * scale);
    if (bytes > 0x1p62)
      return std::nullopt;
    return static_cast<int64_t>(bytes);
  }
  return std::nullopt;
}

std::string format_significant(double value, int digits) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*g", std::clamp(digits, 1, 17), value);
  return buffer;
}

std::string exact_byte_size(int64_t bytes) {
  static const std::pair<const char*, int64_t> units[] = {{"TiB", int64_t{1} << 40},
                                                          {"GiB", int64_t{1} << 30},
                                                          {"MiB", int64_t{1} << 20},
                                                          {"KiB", int64_t{1} << 10}};
  for (const auto& [name, scale] : units) {
    if (bytes != 0 && bytes % scale == 0)
      return std::to_string(bytes / scale) + name;
  }
  return std::to_string(bytes) + "B";
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  char buffer[32];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>((total % 3600) / 60));
  } else if (total >= 60) {
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%llds", static_cast<long long>(total));
  }
  return buffer;
}

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The length of the sequence and the range its second byte must lie in (RFC 3629 table):
    // this excludes overlong forms, surrogates (ED A0-BF) and code points past U+10FFFF.
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      low = lead == 0xE0 ? 0xA0 : 0x80;
      high = lead == 0xED ? 0x9F : 0xBF;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      low = lead == 0xF0 ? 0x90 : 0x80;
      high = lead == 0xF4 ? 0x8F : 0xBF;
    } else {
      return i;
    }
    if (i + length > size || bytes[i + 1] < low || bytes[i + 1] > high)
      return i;
    for (size_t k = 2; k < length; ++k) {
      if (bytes[i + k] < 0x80 || bytes[i + k] > 0xBF)
        return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::string format_fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string format_double(double value) {
  char buffer[64];
  // Whole numbers print as integers ("500", not "5e+02"), as people write them.
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
    return buffer;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  return buffer;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}
}  // namespace

std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (!best || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  // A third of the word's length (at least 2 edits) separates typos from unrelated names.
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  if (best && best_distance <= limit)
    return best;
  return std::nullopt;
}

std::string format_loss(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, std::fabs(value) < 1e4 ? "%.4f" : "%.4g", value);
  return buffer;
}

std::string count_of(int64_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

}  // namespace bigbatch
