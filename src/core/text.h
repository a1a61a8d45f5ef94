#pragma once
// Small text helpers shared by the option parsers and error messages: strict number parsing
// (the whole string must be a number), human-readable counts and durations, and the
// "did you mean" suggestion for misspelt names.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bigbatch {

// Parses the whole string as a number; std::nullopt on anything else ("12 gigs", "", "1e").
std::optional<int64_t> parse_int(const std::string& text);
std::optional<double> parse_double(const std::string& text);

std::string trim(const std::string& text);
std::vector<std::string> split(const std::string& text, char separator);
std::string join(const std::vector<std::string>& parts, const std::string& separator);
// Up to the first newline: a library message without the backtrace that follows it.
std::string first_line(const std::string& text);

// 12345 -> "12.3k"; 2500000 -> "2.5M".
std::string human_count(double value);
// 3 * 2^20 -> "3.0 MiB"; 512 -> "512 B" (binary units, as memory is counted).
std::string human_bytes(double bytes);
// "512MiB", "1.5 GiB", "64KiB", "2GB" (SI: 10^9), "100B" -> bytes. A unit is required, so a
// bare "512" is not silently 512 bytes; std::nullopt on anything else ("12 gigs", "-1MiB").
std::optional<int64_t> parse_byte_size(const std::string& text);
// For display: 6 (or `digits`) significant digits, 0.6000000000000001 -> "0.6"
// (format_double round-trips).
std::string format_significant(double value, int digits = 6);
// A loss for people: four decimals ("0.4065"), and four significant digits once it is large
// ("4.615e+27", not 28 digits of a diverged run).
std::string format_loss(double value);
// The exact inverse of parse_byte_size in the largest whole unit: 536870912 -> "512MiB".
std::string exact_byte_size(int64_t bytes);
// 75.2 -> "1m15s"; 3700 -> "1h01m".
std::string human_duration(double seconds);
// "1 update", "3 updates": a count and its noun, plural (noun + "s") unless the count is 1.
std::string count_of(int64_t count, const std::string& noun);
// The offset of the first byte that does not belong to well-formed UTF-8 (overlong forms,
// surrogates and code points past U+10FFFF included), or nullopt when all of it is.
std::optional<size_t> first_invalid_utf8(std::string_view text);
// `decimals` digits after the point: format_fixed(0.41, 4) -> "0.4100".
std::string format_fixed(double value, int decimals);
// Shortest round-trip decimal form of a double: 0.1 -> "0.1", 1e-05 -> "1e-05".
std::string format_double(double value);

// The candidate closest to `word` by edit distance, if it is close enough to be a likely typo.
std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates);

}  // namespace bigbatch
