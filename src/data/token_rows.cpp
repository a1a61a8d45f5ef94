#include "data/token_rows.h"

#include <string>

#include "core/error.h"

namespace bigbatch {

namespace {

void check_seq_len(int64_t seq_len) {
  if (seq_len < 2) {
    throw Error(ErrorKind::Config, "--seq-len must be at least 2, got " + std::to_string(seq_len),
                "e.g. --seq-len 256");
  }
}

// Appends one row from tokens[0, count) (2 <= count <= width + 1): inputs the first count - 1,
// targets the last count - 1. `token_bytes` (or null) parallels `tokens`.
void append_row(TokenRows& rows, const int32_t* tokens, const int32_t* token_bytes, int64_t count,
                int32_t pad) {
  const int64_t width = rows.width;
  const int64_t targets = count - 1;
  int64_t bytes = 0;
  for (int64_t t = 0; t < width; ++t) {
    const bool real = t < targets;
    rows.inputs.push_back(real ? tokens[t] : pad);
    rows.targets.push_back(real ? tokens[t + 1] : kIgnoreTarget);
    if (real && token_bytes)
      bytes += token_bytes[t + 1];
  }
  rows.lengths.push_back(targets);
  rows.bytes.push_back(bytes);
}

// The bytes of the tokens from `position` on, or null where they are not known.
const int32_t* bytes_at(const TokenDocuments& documents, int64_t position) {
  return documents.bytes.empty() ? nullptr : documents.bytes.data() + position;
}

}  // namespace

void TokenDocuments::add(const std::vector<int32_t>& document) {
  // Ids only: their text, and so their bytes, are not known.
  BB_INTERNAL_ASSERT(bytes.empty(), "TokenDocuments::add on documents that count bytes");
  tokens.insert(tokens.end(), document.begin(), document.end());
  close_document();
}

TokenRows document_rows(const TokenDocuments& documents, int64_t seq_len, int32_t pad) {
  check_seq_len(seq_len);
  TokenRows rows;
  rows.width = seq_len;
  for (int64_t d = 0; d < documents.documents(); ++d) {
    int64_t count = documents.length(d);
    if (count < 2) {
      ++rows.short_documents;
      continue;
    }
    if (count > seq_len + 1) {
      ++rows.cut_documents;
      count = seq_len + 1;
    }
    const int64_t start = documents.starts[size_t(d)];
    append_row(rows, documents.tokens.data() + start, bytes_at(documents, start), count, pad);
  }
  return rows;
}

TokenRows packed_rows(const TokenDocuments& documents, int64_t seq_len, int32_t pad) {
  check_seq_len(seq_len);
  TokenRows rows;
  rows.width = seq_len;
  // Block b covers stream[b * seq_len, b * seq_len + seq_len + 1): its last target is the next
  // block's first input, so every token after the first is predicted exactly once.
  const std::vector<int32_t>& stream = documents.tokens;
  const int64_t total = static_cast<int64_t>(stream.size());
  for (int64_t begin = 0; begin + seq_len + 1 <= total; begin += seq_len)
    append_row(rows, stream.data() + begin, bytes_at(documents, begin), seq_len + 1, pad);
  return rows;
}

}  // namespace bigbatch
