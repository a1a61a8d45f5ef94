// libFuzzer target: any bytes, as UTF-8 (the validator's offset and valid prefix), as a
// fortune-format (or blank-, line- or literal-separated)
// corpus or as JSON Lines, either make documents or are a bigbatch::Error; their token rows and
// every token packing keep their invariants (shift, padding, lengths within the row, every
// sample once, every micro-batch within its budget).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "batching/token_packing.h"
#include "core/error.h"
#include "core/text.h"
#include "data/text_corpus.h"

namespace {

void check(bool ok) {
  if (!ok)
    std::abort();
}

void check_rows(const bigbatch::TokenRows& rows) {
  const auto width = static_cast<size_t>(rows.width);
  const std::vector<int32_t> inputs = rows.inputs();
  const std::vector<int32_t> targets = rows.targets();
  check(inputs.size() == rows.lengths.size() * width);
  check(targets.size() == inputs.size());
  for (size_t r = 0; r < rows.lengths.size(); ++r) {
    check(rows.lengths[r] >= 1 && rows.lengths[r] <= rows.width);
    check(rows.bytes[r] >= 0 && rows.bytes[r] <= rows.lengths[r]);
    for (size_t t = 0; t < width; ++t) {
      const int32_t target = targets[r * width + t];
      const bool real = int64_t(t) < rows.lengths[r];
      check(real ? target >= 0 && target <= bigbatch::kEndOfText
                 : target == bigbatch::kIgnoreTarget);
      // The shift: a real target is the next position's input.
      if (real && t + 1 < width && int64_t(t + 1) < rows.lengths[r])
        check(inputs[r * width + t + 1] == target);
    }
  }
}

void check_packing(const bigbatch::TokenRows& rows, int64_t budget) {
  std::vector<int64_t> samples;
  for (int64_t i = 0; i < rows.rows(); ++i)
    samples.push_back(i);
  const auto packing = bigbatch::pack_by_tokens(samples.data(), rows.rows(), rows.lengths, budget);
  int64_t begin = 0;
  for (const int64_t size : packing.micro_batch_sizes) {
    check(size >= 1);
    int64_t longest = 0;
    for (int64_t i = begin; i < begin + size; ++i)
      longest = std::max(longest, rows.lengths[size_t(packing.rows[size_t(i)])]);
    check(size == 1 || size * longest <= budget);
    begin += size;
  }
  check(begin == rows.rows());
  std::vector<int64_t> sorted = packing.rows;
  std::sort(sorted.begin(), sorted.end());
  check(sorted == samples);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3)
    return 0;
  const uint8_t mode = data[0];
  const int64_t seq_len = 2 + data[1] % 63;
  const int64_t budget = 1 + data[2] * 3;
  const std::string text(reinterpret_cast<const char*>(data + 3), size - 3);
  // The UTF-8 check (sentencepiece's input): an offset inside the text, whose prefix is valid.
  if (const auto bad = bigbatch::first_invalid_utf8(text)) {
    check(*bad < text.size());
    check(!bigbatch::first_invalid_utf8(std::string_view(text).substr(0, *bad)));
  }
  std::vector<std::string> documents;
  if (mode % 5 == 4) {
    try {
      documents = bigbatch::parse_jsonl_corpus(text, "text", "fuzz.jsonl").documents;
    } catch (const bigbatch::Error&) {
      return 0;
    }
  } else {
    static const char* const separators[] = {"%", "blank", "line", "---"};
    documents = bigbatch::split_documents(text, separators[mode % 5]);
  }
  for (const auto& document : documents)
    check(!document.empty());
  const auto rows = bigbatch::document_rows(documents, seq_len);
  check(rows.rows() == int64_t(documents.size()));
  check_rows(rows);
  check_packing(rows, budget);
  const auto packed = bigbatch::packed_rows(documents, seq_len);
  check_rows(packed);
  check_packing(packed, budget);
  return 0;
}
