#include "data/token_rows.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace bigbatch {

namespace {

void check_seq_len(int64_t seq_len) {
  if (seq_len < 2) {
    throw Error(ErrorKind::Config, "--seq-len must be at least 2, got " + std::to_string(seq_len),
                "e.g. --seq-len 256");
  }
}

template <typename T>
void widen(const uint8_t* data, int64_t count, int64_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    T value;
    std::memcpy(&value, data + size_t(i) * sizeof(T), sizeof(T));  // unaligned, little-endian
    out[i] = static_cast<int64_t>(value);
  }
}

// Appends the row of tokens [start, start + count) (2 <= count <= width + 1): count - 1 targets,
// and the text bytes among them.
void append_row(TokenRows& rows, const TokenDocuments& documents, int64_t start, int64_t count) {
  rows.starts.push_back(start);
  rows.lengths.push_back(count - 1);
  int64_t bytes = 0;
  if (!documents.bytes.empty()) {
    for (int64_t t = start + 1; t < start + count; ++t)
      bytes += documents.bytes[size_t(t)];
  }
  rows.bytes.push_back(bytes);
}

TokenRows rows_over(std::shared_ptr<const TokenDocuments> documents, int64_t seq_len, int32_t pad) {
  check_seq_len(seq_len);
  BB_INTERNAL_ASSERT(documents != nullptr, "token rows need their documents");
  TokenRows rows;
  rows.width = seq_len;
  rows.pad = pad;
  rows.source = std::move(documents);
  return rows;
}

}  // namespace

void TokenSpans::append(std::shared_ptr<const void> owner, const uint8_t* data, int64_t count,
                        int bytes, bool is_signed) {
  BB_INTERNAL_ASSERT(bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8,
                     "token ids are 1, 2, 4 or 8 bytes");
  if (count == 0)
    return;
  spans_.push_back({size_, data, count, bytes, is_signed});
  if (owner)
    owners_.push_back(std::move(owner));
  size_ += count;
}

void TokenSpans::read(int64_t begin, int64_t count, int64_t* out) const {
  BB_INTERNAL_ASSERT(begin >= 0 && count >= 0 && begin + count <= size_,
                     "tokens read outside their spans");
  // The span holding `begin`: the last whose first id is at or before it.
  auto span = std::upper_bound(spans_.begin(), spans_.end(), begin,
                               [](int64_t position, const Span& s) { return position < s.first; });
  --span;
  while (count > 0) {
    const int64_t offset = begin - span->first;
    const int64_t take = std::min(count, span->count - offset);
    const uint8_t* data = span->data + size_t(offset) * size_t(span->bytes);
    switch (span->bytes) {
      case 1:
        span->is_signed ? widen<int8_t>(data, take, out) : widen<uint8_t>(data, take, out);
        break;
      case 2:
        span->is_signed ? widen<int16_t>(data, take, out) : widen<uint16_t>(data, take, out);
        break;
      case 4:
        span->is_signed ? widen<int32_t>(data, take, out) : widen<uint32_t>(data, take, out);
        break;
      default:
        widen<int64_t>(data, take, out);
        break;
    }
    begin += take;
    out += take;
    count -= take;
    ++span;
  }
}

void TokenDocuments::read(int64_t begin, int64_t count, int64_t* out) const {
  if (!spans.empty()) {
    spans.read(begin, count, out);
    return;
  }
  BB_INTERNAL_ASSERT(begin >= 0 && count >= 0 && begin + count <= int64_t(tokens.size()),
                     "tokens read outside the documents");
  std::copy(tokens.begin() + begin, tokens.begin() + begin + count, out);
}

std::vector<int32_t> TokenDocuments::all_tokens() const {
  std::vector<int64_t> wide(static_cast<size_t>(size()));
  read(0, size(), wide.data());
  return std::vector<int32_t>(wide.begin(), wide.end());
}

void TokenDocuments::add(const std::vector<int32_t>& document) {
  // Ids only: their text, and so their bytes, are not known.
  BB_INTERNAL_ASSERT(bytes.empty(), "TokenDocuments::add on documents that count bytes");
  BB_INTERNAL_ASSERT(spans.empty(), "TokenDocuments::add on documents held in spans");
  tokens.insert(tokens.end(), document.begin(), document.end());
  close_document();
}

void TokenRows::fill(int64_t row, int64_t* inputs, int64_t* targets, int64_t positions) const {
  BB_INTERNAL_ASSERT(row >= 0 && row < rows() && positions <= width, "row outside the table");
  const int64_t length = lengths[size_t(row)];
  const int64_t real = std::min(length, positions);
  if (real > 0) {
    // inputs[t] = token t, targets[t] = token t + 1: read the real inputs, then shift in place.
    source->read(starts[size_t(row)], real, inputs);
    std::copy(inputs + 1, inputs + real, targets);
    source->read(starts[size_t(row)] + real, 1, targets + real - 1);
  }
  std::fill(inputs + real, inputs + positions, int64_t{pad});
  std::fill(targets + real, targets + positions, int64_t{kIgnoreTarget});
}

TokenRows TokenRows::select(const std::vector<int64_t>& rows) const {
  TokenRows out;
  out.width = width;
  out.pad = pad;
  out.source = source;
  out.cut_documents = cut_documents;
  out.short_documents = short_documents;
  out.starts.reserve(rows.size());
  out.lengths.reserve(rows.size());
  out.bytes.reserve(rows.size());
  for (int64_t row : rows) {
    BB_INTERNAL_ASSERT(row >= 0 && row < this->rows(), "row outside the table");
    out.starts.push_back(starts[size_t(row)]);
    out.lengths.push_back(lengths[size_t(row)]);
    out.bytes.push_back(bytes[size_t(row)]);
  }
  return out;
}

std::vector<int32_t> TokenRows::inputs() const {
  return flat(/*targets=*/false);
}

std::vector<int32_t> TokenRows::targets() const {
  return flat(/*targets=*/true);
}

std::vector<int32_t> TokenRows::flat(bool of_targets) const {
  std::vector<int64_t> in(static_cast<size_t>(width)), out(static_cast<size_t>(width));
  std::vector<int32_t> all;
  for (int64_t r = 0; r < rows(); ++r) {
    fill(r, in.data(), out.data(), width);
    const auto& picked = of_targets ? out : in;
    all.insert(all.end(), picked.begin(), picked.end());
  }
  return all;
}

TokenRows document_rows(std::shared_ptr<const TokenDocuments> documents, int64_t seq_len,
                        int32_t pad) {
  TokenRows rows = rows_over(std::move(documents), seq_len, pad);
  const TokenDocuments& docs = *rows.source;
  for (int64_t d = 0; d < docs.documents(); ++d) {
    int64_t count = docs.length(d);
    if (count < 2) {
      ++rows.short_documents;
      continue;
    }
    if (count > seq_len + 1) {
      ++rows.cut_documents;
      rows.cut_tokens += count - (seq_len + 1);
      count = seq_len + 1;
    }
    append_row(rows, docs, docs.starts[size_t(d)], count);
  }
  return rows;
}

TokenRows packed_rows(std::shared_ptr<const TokenDocuments> documents, int64_t seq_len,
                      int32_t pad) {
  TokenRows rows = rows_over(std::move(documents), seq_len, pad);
  const TokenDocuments& docs = *rows.source;
  // Block b covers stream[b * seq_len, b * seq_len + seq_len + 1): its last target is the next
  // block's first input, so every token after the first is predicted exactly once.
  const int64_t total = docs.size();
  for (int64_t begin = 0; begin + seq_len + 1 <= total; begin += seq_len)
    append_row(rows, docs, begin, seq_len + 1);
  return rows;
}

TokenRows document_rows(TokenDocuments documents, int64_t seq_len, int32_t pad) {
  return document_rows(std::make_shared<const TokenDocuments>(std::move(documents)), seq_len, pad);
}

TokenRows packed_rows(TokenDocuments documents, int64_t seq_len, int32_t pad) {
  return packed_rows(std::make_shared<const TokenDocuments>(std::move(documents)), seq_len, pad);
}

}  // namespace bigbatch
