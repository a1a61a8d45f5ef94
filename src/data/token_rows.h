#pragma once
// Token documents as the fixed-width rows the trainer batches, torch-free. Whatever made the
// tokens (the byte tokenizer, sentencepiece, a token file), a row is cut the same way:
//
//   --sequences documents: each document one row, cut at seq_len + 1 tokens;
//   --sequences packed:    every document joined into one stream (in order, as they are: a
//                          tokenizer or a token file put its own separators in), cut into
//                          blocks of seq_len + 1 tokens, nanoGPT and Megatron style.
//
// A row of n + 1 tokens has n inputs and n targets (the shift): its items are those n target
// tokens, counted exactly; positions past them hold `pad` as input and kIgnoreTarget as target.
//
//   TokenDocuments docs;
//   docs.add({5, 9, 2});                        // one document of three tokens
//   TokenRows rows = document_rows(docs, /*seq_len=*/256, /*pad=*/0);
#include <cstddef>
#include <cstdint>
#include <vector>

namespace bigbatch {

// PyTorch's cross_entropy ignore_index default: targets of padding.
inline constexpr int32_t kIgnoreTarget = -100;

// Documents of token ids, stored end to end: document d is tokens[starts[d], starts[d + 1]).
// `bytes`, where the text behind the tokens is known (a tokenizer made them), holds the text
// bytes each token stands for (bits per byte are the loss over these; 0 for end-of-text);
// empty for token files, whose rows then count no bytes.
struct TokenDocuments {
  std::vector<int32_t> tokens;
  std::vector<int32_t> bytes;
  std::vector<int64_t> starts{0};
  int64_t documents() const { return static_cast<int64_t>(starts.size()) - 1; }
  int64_t length(int64_t d) const { return starts[size_t(d) + 1] - starts[size_t(d)]; }
  void add(const std::vector<int32_t>& document);
  // Ends the document whose tokens were appended to `tokens` since the last one ended.
  void close_document() { starts.push_back(static_cast<int64_t>(tokens.size())); }
};

struct TokenRows {
  int64_t width = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  std::vector<int64_t> lengths;  // target tokens per row (the row's items)
  std::vector<int64_t> bytes;    // text bytes among them (tokens with no text excluded)
  int64_t cut_documents = 0;     // documents longer than a row, cut at seq_len + 1 tokens
  int64_t short_documents = 0;   // documents of fewer than 2 tokens: nothing to predict
  int64_t rows() const { return static_cast<int64_t>(lengths.size()); }
};

// Throws bigbatch::Error (Config) for seq_len < 2.
TokenRows document_rows(const TokenDocuments& documents, int64_t seq_len, int32_t pad);
// The tail that fills no block is dropped.
TokenRows packed_rows(const TokenDocuments& documents, int64_t seq_len, int32_t pad);

}  // namespace bigbatch
