#include "sweep/sweep_grid.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "core/text.h"

namespace bigbatch {

namespace {
[[noreturn]] void bad_list(const std::string& text, const std::string& why) {
  throw Error(ErrorKind::Config, "--global-batch list '" + text + "' " + why,
              "give sizes like 32,64,128 or a doubling run 32,64,...,4096");
}

int64_t batch_item(const std::string& text, const std::string& item) {
  const auto value = parse_int(item);
  if (!value || *value <= 0 || *value > (int64_t{1} << 31))
    bad_list(text, "has '" + trim(item) + "', which is not a batch size");
  return *value;
}
}  // namespace

std::vector<int64_t> parse_batch_list(const std::string& text) {
  const auto items = split(text, ',');
  std::vector<int64_t> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (trim(items[i]) != "...") {
      out.push_back(batch_item(text, items[i]));
      continue;
    }
    // a, b, ..., last: continue the ratio b / a up to last.
    if (out.size() < 2 || i + 2 != items.size())
      bad_list(text, "needs two sizes before '...' and one after it");
    const int64_t a = out[out.size() - 2], b = out.back();
    const int64_t last = batch_item(text, items[i + 1]);
    if (b <= a || b % a != 0)
      bad_list(text, "continues a ratio that is not a whole number above 1");
    const int64_t ratio = b / a;
    int64_t next = b;
    while (next < last) {
      if (next > (int64_t{1} << 31) / ratio)
        bad_list(text, "grows past 2^31");
      next *= ratio;
      out.push_back(next);
    }
    if (next != last)
      bad_list(text, "does not reach " + std::to_string(last) + " by multiplying by " +
                         std::to_string(ratio));
    break;
  }
  if (out.empty())
    bad_list(text, "is empty");
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] <= out[i - 1])
      bad_list(text, "is not increasing");
  }
  return out;
}

std::vector<std::string> parse_word_list(const std::string& text, const std::string& flag,
                                         void (*check)(const std::string&)) {
  std::vector<std::string> out;
  for (const auto& item : split(text, ',')) {
    const std::string word = trim(item);
    if (word.empty()) {
      throw Error(ErrorKind::Config, flag + " list '" + text + "' has an empty item",
                  "separate values by single commas");
    }
    check(word);
    if (std::find(out.begin(), out.end(), word) != out.end()) {
      // Two cells of one name would share one run directory.
      throw Error(ErrorKind::Config, flag + " list '" + text + "' names '" + word + "' twice",
                  "give each value once");
    }
    out.push_back(word);
  }
  return out;
}

std::string SweepCell::name() const {
  char buffer[128];
  std::string w = warmup;
  for (char& c : w) {
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  }
  std::snprintf(buffer, sizeof buffer, "gb%06lld-%s-w%s", static_cast<long long>(global_batch),
                lr_scaling.c_str(), w.c_str());
  return buffer;
}

std::string SweepCell::series() const {
  return lr_scaling + ", warmup " + warmup;
}

int64_t SweepCell::micro_batch(int64_t micro_batch) const {
  const int64_t micro = std::min(micro_batch, global_batch);
  if (lr_scaling == "adascale" && global_batch >= 2)
    return std::min(micro, global_batch / 2);
  return micro;
}

std::vector<SweepCell> SweepGrid::cells() const {
  std::vector<SweepCell> out;
  for (int64_t batch : global_batches) {
    for (const auto& scaling : lr_scalings) {
      for (const auto& w : warmups)
        out.push_back({batch, scaling, w});
    }
  }
  for (SweepCell& cell : out) {
    if (cell.global_batch != reference_batch || cell.lr_scaling == "adascale")
      continue;
    const auto first = std::find_if(out.begin(), out.end(), [&](const SweepCell& other) {
      return other.global_batch == cell.global_batch && other.warmup == cell.warmup &&
             other.lr_scaling != "adascale";
    });
    if (&*first != &cell)
      cell.same_as = first->name();
  }
  return out;
}

}  // namespace bigbatch
